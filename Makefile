# The two commands a newcomer needs: `make demo` and `make test`. Both do all set-up.
BUILD ?= build
JOBS ?= $(shell nproc)
# ON turns warnings into errors (CI sets it; users' builds do not need it).
GANNET_WERROR ?= OFF

.PHONY: all setup configure build build-demo demo test build-clang test-clang build-sanitize test-sanitize \
        bench fuzz clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja: | setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANNET_WERROR=$(GANNET_WERROR)

configure: setup $(BUILD)/build.ninja

# Everything: the binary, its libraries, the tests, fuzz replays, benches, the Python module.
build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Only what the demo runs: the gannet binary and the libraries it links.
build-demo: configure
	cmake --build $(BUILD) -j $(JOBS) --target gannet

demo: build-demo
	bash scripts/demo.sh $(BUILD)

# The whole suite (every ctest entry, whatever its labels).
test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The whole tree built with clang++ instead of g++, and the tests labelled `exact` (the
# compiler-independent bits: kernels, goldens, invariance, engine exactness) run on it:
# results must not depend on the compiler (DESIGN principle 1; every target is built with
# -ffp-contract=off). Installs clang when missing.
build-clang:
	@bash scripts/setup.sh clang
	CXX=clang++ cmake -S . -B $(BUILD)-clang -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANNET_WERROR=$(GANNET_WERROR)
	cmake --build $(BUILD)-clang -j $(JOBS)

test-clang: build-clang
	cd $(BUILD)-clang && ctest --output-on-failure -j $(JOBS) -L '^exact$$'

# The tests labelled `sanitize` (unit tests, fuzz replays, the engine, caches and disk
# tier, MPI) built with AddressSanitizer + UndefinedBehaviorSanitizer in $(BUILD)-asan;
# any report fails them. Builds only what those tests run (target tests-sanitize).
build-sanitize: setup
	cmake -S . -B $(BUILD)-asan -G Ninja -DCMAKE_BUILD_TYPE=Release -DGANNET_SANITIZE=ON -DGANNET_WERROR=$(GANNET_WERROR)
	cmake --build $(BUILD)-asan -j $(JOBS) --target tests-sanitize

test-sanitize: build-sanitize
	cd $(BUILD)-asan && ctest --output-on-failure -j $(JOBS) -L '^sanitize$$'

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
	rm -rf $(BUILD) $(BUILD)-pip $(BUILD)-fuzz $(BUILD)-clang $(BUILD)-clang-pip $(BUILD)-asan
