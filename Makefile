# The two commands a newcomer needs: `make demo` and `make test`. Both do all set-up.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all setup configure build demo test bench fuzz clean

all: build

setup:
	@bash scripts/setup.sh

$(BUILD)/build.ninja: | setup
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release

configure: setup $(BUILD)/build.ninja

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	bash scripts/demo.sh $(BUILD)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The standard benchmark sweep on the 1b preset: JSON, CSV and PNG under $(BUILD)/bench/.
bench: build
	bash scripts/bench.sh $(BUILD)

# Coverage-guided fuzzing of the checkpoint parsers with clang's libFuzzer.
fuzz: setup
	CXX=clang++ cmake -S . -B $(BUILD)-fuzz -G Ninja -DGANNET_FUZZ=ON -DCMAKE_BUILD_TYPE=Release
	cmake --build $(BUILD)-fuzz --target fuzz_safetensors fuzz_config
	@echo "run e.g.: $(BUILD)-fuzz/fuzz/fuzz_safetensors fuzz/corpus/safetensors -max_total_time=60"

clean:
	rm -rf $(BUILD) $(BUILD)-fuzz
