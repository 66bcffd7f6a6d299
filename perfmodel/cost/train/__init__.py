"""Training work priced per GPU and micro-batch: the work lists of each layer (`layers`, `attention`, `work`),
their model FLOPs (`flops`), MoE routing load (`moe`), and the times the pipeline simulator consumes (`stage`)."""
