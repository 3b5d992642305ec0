#include "core/collective.h"

#include <cstring>

#include "core/error.h"

namespace gannet {

namespace {

class SingleRank final : public Collective {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  bool any(bool mine) override { return mine; }
  void all_reduce_sum(int64_t*, int64_t) override {}
  void all_reduce_max(double*, int64_t) override {}
  void all_to_all(const int64_t* send, int64_t* recv) override { recv[0] = send[0]; }
  void all_to_all_v(const void* send, const int64_t* send_bytes, void* recv, const int64_t* recv_bytes) override {
    GANNET_CHECK(send_bytes[0] == recv_bytes[0], "all_to_all_v sizes");
    if (send_bytes[0] > 0 && send != recv) std::memmove(recv, send, size_t(send_bytes[0]));
  }
  std::string broadcast(const std::string& text) override { return text; }
  std::string broadcast_wait(const std::string& text) override { return text; }
  std::vector<std::string> gather(const std::string& text) override { return {text}; }
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) override {
    GANNET_CHECK(sends.size() == recvs.size(), "exchange with oneself: ", sends.size(), " sends, ", recvs.size(),
                 " receives");
    for (size_t i = 0; i < sends.size(); ++i) {
      GANNET_CHECK(sends[i].bytes == recvs[i].bytes, "exchange sizes");
      if (sends[i].bytes > 0) std::memmove(recvs[i].data, sends[i].data, size_t(sends[i].bytes));
    }
  }
  std::unique_ptr<Collective> split() override { return std::make_unique<SingleRank>(); }
};

}  // namespace

std::unique_ptr<Collective> single_rank() { return std::make_unique<SingleRank>(); }

}  // namespace gannet
