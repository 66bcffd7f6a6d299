.PHONY: test test-fast
# Install the test dependencies, then run the whole suite (the README's test command; .ci/run calls it).
# pytest exits 5 when it collects no test: that is a failure here, said plainly.
# The unit tests run on both cores (pytest-xdist, -n 2); the integration tests (real SGLang, torchrun, Ray, Chromium:
# marked slow) run after them one at a time, since they time real runs and each already keeps both cores busy.
test:
	bash scripts/install-test-deps.sh
	python3 -m pytest -n 2 --dist loadgroup -m "not slow"; rc=$$?; \
	python3 -m pytest -m slow; rc2=$$?; \
	for r in $$rc $$rc2; do if [ $$r -eq 5 ]; then echo "error: pytest collected no tests" >&2; fi; done; \
	if [ $$rc -ne 0 ]; then exit $$rc; fi; exit $$rc2

# Unit tests only (no SGLang / torchrun / Ray / Chromium integration tests), the input fuzz at a fifth of its
# count (make test runs all of it).
test-fast:
	FUZZ_SCALE=0.2 python3 -m pytest -n 2 --dist loadgroup -m "not slow"
