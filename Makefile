.PHONY: test test-fast
# Install the test dependencies, then run the whole suite (the README's test command; .ci/run calls it).
# pytest exits 5 when it collects no test: that is a failure here, said plainly.
# The unit tests run in three pytest-xdist workers on the two cores: many of them wait on a subprocess (a sweep
# being interrupted, a CLI run), and a third worker fills those waits (unit phase 253 -> 238 s here). The
# integration tests (real SGLang, torchrun, Ray, Chromium: marked slow) run after them one at a time: each real
# run keeps both cores busy (torch's threads, SGLang's processes), and two at once run each 2-3x slower (measured:
# 639 s for what takes about 690 s one at a time) and miss the fault tests' deadlines. The two that compare timings of real runs (marked timing) come last in that
# session, on a host that has finished everything else (tests/conftest.py orders them).
test:
	bash scripts/install-test-deps.sh
	python3 -m pytest -n 3 --dist loadgroup -m "not slow"; rc1=$$?; \
	python3 -m pytest -m slow; rc2=$$?; \
	for r in $$rc1 $$rc2; do if [ $$r -eq 5 ]; then echo "error: pytest collected no tests" >&2; fi; done; \
	for r in $$rc1 $$rc2; do if [ $$r -ne 0 ]; then exit $$r; fi; done

# Unit tests only (no SGLang / torchrun / Ray / Chromium integration tests), the input fuzz at a fifth of its
# count (make test runs all of it).
test-fast:
	FUZZ_SCALE=0.2 python3 -m pytest -n 3 --dist loadgroup -m "not slow"
