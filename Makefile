# ssmops: the two commands a newcomer needs (POSIX make; CMake does the real work).
#   make / make build   configure (Release) into build/ and compile
#   make run            build, then check and benchmark the Mamba-2 scan with the CLI
#   make test           build, run every test (C, then the Python package's with pytest), then
#                       the C tests again in an ASan+UBSan build, then
#                       make tsan, then make fuzz (where clang is installed)
#   make tsan           the concurrency test in a ThreadSanitizer build (CPU backend only)
#   make fuzz           the libFuzzer harnesses (clang, CPU backend), FUZZ_SECONDS each
#   make clean          remove the build directories
# Variables: BUILD, ASAN_BUILD, TSAN_BUILD, FUZZ_BUILD, FUZZ_SECONDS (default 30), CMAKE, CTEST, JOBS (default: the number of CPUs),
# ASAN_CUDA (the sanitizer build's SSMOPS_CUDA: AUTO where nvidia-smi sees a GPU, else OFF),
# PYTHON (default /usr/bin/python3),
# CMAKE_FLAGS (extra configure arguments for every build), e.g. make test JOBS=4.

.POSIX:

BUILD       = build
ASAN_BUILD  = build-asan
TSAN_BUILD  = build-tsan
FUZZ_BUILD  = build-fuzz
FUZZ_SECONDS = 30
CMAKE       = cmake
CTEST       = ctest
JOBS        = $$(nproc)
# Debian's interpreter (python3-numpy, python3-torch, python3-pytest) runs the Python tests.
PYTHON      = /usr/bin/python3
# The sanitizer build compiles the CUDA kernels only where a GPU can run their tests.
ASAN_CUDA   = $$(nvidia-smi -L >/dev/null 2>&1 && echo AUTO || echo OFF)
# Without CUDA in it, the sanitizer build uses clang where it is installed: clang's UBSan also
# reports pointer arithmetic on NULL (pointer-overflow), which GCC's does not.
ASAN_CC     = $$(if ! nvidia-smi -L >/dev/null 2>&1 && command -v clang >/dev/null 2>&1; then echo -DCMAKE_C_COMPILER=clang; fi)
CMAKE_FLAGS =

all: build

build: FORCE
	$(CMAKE) -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	$(CMAKE) --build $(BUILD) -j $(JOBS)

run: build
	./$(BUILD)/ssmops check mamba2_scan
	./$(BUILD)/ssmops bench mamba2_scan

# The sanitizer build uses -O1 with assertions on (no -DNDEBUG): fast enough for the whole
# suite on two cores. UBSan stops at its first report (-fno-sanitize-recover).
test: build
	cd $(BUILD) && $(CTEST) --output-on-failure -j $(JOBS)
	SSMOPS_LIBRARY=$$(pwd)/$(BUILD)/libssmops.so $(PYTHON) -m pytest -q tests/python
	$(CMAKE) -S . -B $(ASAN_BUILD) -DSSMOPS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" -DSSMOPS_CUDA=$(ASAN_CUDA) $(ASAN_CC) $(CMAKE_FLAGS)
	$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && UBSAN_OPTIONS=print_stacktrace=1 $(CTEST) --output-on-failure -j $(JOBS)
	$(MAKE) tsan
	@if command -v clang >/dev/null 2>&1; then $(MAKE) fuzz FUZZ_SECONDS=0; else echo "make test: no clang, the fuzz harnesses are skipped"; fi

# ThreadSanitizer: the library and test_concurrency only, CPU backend, -O1 as above (about half
# a minute on two cores: docs/RELIABILITY.md); the first report fails the run (halt_on_error).
tsan: FORCE
	$(CMAKE) -S . -B $(TSAN_BUILD) -DSSMOPS_TSAN=ON -DSSMOPS_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" $(CMAKE_FLAGS)
	$(CMAKE) --build $(TSAN_BUILD) -j $(JOBS) --target test_concurrency
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ./$(TSAN_BUILD)/tests/test_concurrency

# libFuzzer harnesses (tests/fuzz, docs/RELIABILITY.md): clang with ASan+UBSan, CPU backend;
# each harness replays its seed corpus, then fuzzes for FUZZ_SECONDS (the two run in parallel).
# make test runs them with FUZZ_SECONDS=0: the corpus replay alone, the same every run (a new
# finding must not turn CI red at random); fuzzing itself is `make fuzz`.
fuzz: FORCE
	$(CMAKE) -S . -B $(FUZZ_BUILD) -DCMAKE_C_COMPILER=clang -DSSMOPS_FUZZ=ON -DSSMOPS_CUDA=OFF \
	    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" \
	    -DSSMOPS_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CMAKE_FLAGS)
	$(CMAKE) --build $(FUZZ_BUILD) -j $(JOBS) --target fuzz_ops fuzz_npy
	cd $(FUZZ_BUILD) && $(CTEST) -L fuzz --output-on-failure -j $(JOBS)

clean: FORCE
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD) $(FUZZ_BUILD)

# `build` is also the name of a directory: FORCE (and .PHONY, where make knows it) keeps
# the targets from being taken as up to date.
FORCE:

.PHONY: all build run test tsan fuzz clean FORCE
