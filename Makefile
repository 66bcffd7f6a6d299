.PHONY: test test-fast
# Install the test dependencies, then run the whole suite (the README's test command; .ci/run calls it).
# pytest exits 5 when it collects no test: that is a failure here, said plainly.
test:
	bash scripts/install-test-deps.sh
	python3 -m pytest; rc=$$?; if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests" >&2; fi; exit $$rc

# Unit tests only (no SGLang / torchrun / Ray / Chromium integration tests), the input fuzz at a fifth of its
# count (make test runs all of it).
test-fast:
	FUZZ_SCALE=0.2 python3 -m pytest -m "not slow"
