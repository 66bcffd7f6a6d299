"""DeepSeek-V4 components in miniature for the local backend: shared math (math.py) and the megatron-core layer
spec (megatron_layer.py); the SGLang model class is executor/backends/local/sglang_models/dsv4mini.py."""
