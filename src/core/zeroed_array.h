// A fixed-size array of trivially copyable values that reads as zeros and costs memory
// only where it is written: it is an anonymous private mapping, whose pages the kernel
// supplies zeroed on first touch. A std::vector of the same size writes every byte when
// it is made (value-initialisation), which for a buffer sized to the worst step (the
// logits of max_logit_rows x a 129k vocabulary: a quarter of a GiB) costs start-up time
// and resident memory that a run with few sequences never uses.
#pragma once

#include <cstddef>
#include <type_traits>
#include <utility>

namespace gannet {

namespace detail {
void* map_zeroed(size_t bytes);             // fails with an error naming the size
void unmap_zeroed(void* p, size_t bytes);
}  // namespace detail

template <typename T>
class ZeroedArray {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_default_constructible_v<T>);

 public:
  ZeroedArray() = default;
  explicit ZeroedArray(size_t n) : n_(n) {
    if (n) p_ = static_cast<T*>(detail::map_zeroed(n * sizeof(T)));
  }
  ZeroedArray(ZeroedArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  ZeroedArray& operator=(ZeroedArray&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ZeroedArray(const ZeroedArray&) = delete;
  ZeroedArray& operator=(const ZeroedArray&) = delete;
  ~ZeroedArray() { release(); }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  T& operator[](size_t i) { return p_[i]; }
  const T& operator[](size_t i) const { return p_[i]; }

 private:
  void release() {
    if (p_) detail::unmap_zeroed(p_, n_ * sizeof(T));
    p_ = nullptr;
    n_ = 0;
  }

  T* p_ = nullptr;
  size_t n_ = 0;
};

}  // namespace gannet
