"""Serving work priced per GPU: an SGLang engine's prefill, decode and KV costs (`engine`) and the weight update
from the trainer to the engines (`weight_update`)."""
