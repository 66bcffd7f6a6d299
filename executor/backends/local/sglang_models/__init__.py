"""SGLang model classes of the local backend (SGLANG_EXTERNAL_MODEL_PACKAGE): every module here is imported by
SGLang for its EntryClass."""
