# ssmops: the two commands a newcomer needs (POSIX make; CMake does the real work).
#   make / make build   configure (Release) into build/ and compile
#   make run            build, then check and benchmark the Mamba-2 scan with the CLI
#   make test           build, run every test, then all again in an ASan+UBSan build
#   make clean          remove both build directories
# Variables: BUILD, ASAN_BUILD, CMAKE, CTEST, JOBS (default: the number of CPUs),
# CMAKE_FLAGS (extra configure arguments for both builds), e.g. make test JOBS=4.

.POSIX:

BUILD       = build
ASAN_BUILD  = build-asan
CMAKE       = cmake
CTEST       = ctest
JOBS        = $$(nproc)
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
	$(CMAKE) -S . -B $(ASAN_BUILD) -DSSMOPS_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	    -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g" $(CMAKE_FLAGS)
	$(CMAKE) --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && UBSAN_OPTIONS=print_stacktrace=1 $(CTEST) --output-on-failure -j $(JOBS)

clean: FORCE
	rm -rf $(BUILD) $(ASAN_BUILD)

# `build` is also the name of a directory: FORCE (and .PHONY, where make knows it) keeps
# the targets from being taken as up to date.
FORCE:

.PHONY: all build run test clean FORCE
