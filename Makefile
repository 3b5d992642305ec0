# The two commands a newcomer needs: `make demo` and `make test`. Both do all set-up.
BUILD ?= build
JOBS ?= $(shell nproc)
# ON turns warnings into errors (CI sets it; users' builds do not need it).
GANNET_WERROR ?= OFF

.PHONY: all setup configure build demo test test-clang test-sanitize bench fuzz clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja: | setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANNET_WERROR=$(GANNET_WERROR)

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole suite built with clang++ instead of g++: bit-exactness must not depend on the
# compiler (DESIGN principle 1). Installs clang when missing.
test-clang:
	@bash scripts/setup.sh clang
	CXX=clang++ cmake -S . -B $(BUILD)-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANNET_WERROR=$(GANNET_WERROR)
	cmake --build $(BUILD)-clang -j $(JOBS)
	cd $(BUILD)-clang && ctest --output-on-failure -j $(JOBS)

# The C++ unit, integration and golden tests under AddressSanitizer + UndefinedBehaviorSanitizer.
test-sanitize: setup
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANNET_SANITIZE=ON -DGANNET_WERROR=$(GANNET_WERROR)
	cmake --build $(BUILD)-asan -j $(JOBS)
	cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) -E '^pytest$$'

# The standard benchmark sweep on the 1b preset: JSON, CSV and PNG under $(BUILD)/bench/.
bench: build
	bash scripts/bench.sh $(BUILD)

# Coverage-guided fuzzing of the checkpoint parsers with clang's libFuzzer.
fuzz:
	@bash scripts/setup.sh clang
	CXX=clang++ cmake -S . -B $(BUILD)-fuzz -G Ninja -DGANNET_FUZZ=ON -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD)-fuzz --target fuzz_safetensors fuzz_config
	@echo "run e.g.: $(BUILD)-fuzz/fuzz/fuzz_safetensors fuzz/corpus/safetensors -max_total_time=60"

clean:
	rm -rf $(BUILD) $(BUILD)-fuzz $(BUILD)-clang $(BUILD)-asan
