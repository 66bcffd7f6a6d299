"""Miles train arguments for the RL algorithm and its batch: GRPO or PPO (with its critic), the prompt data and
rollout batch, the optimizer, how many optimizer steps a rollout feeds, and evaluation."""

from __future__ import annotations

import json
from dataclasses import dataclass

from executor.backends.miles.args_common import ArgGroup, fail, fmt
from executor.backends.miles.options import MilesOptions
from perfmodel.inputs.job import RLSpec, TrainSpec
from perfmodel.inputs.plan import Plan
from perfmodel.inputs.scenario import Scenario

FULLY_ASYNC_ROLLOUT_FUNCTION = "fully_async_rollout.generate_rollout_fully_async"  # examples/fully_async


@dataclass(frozen=True, slots=True)
class BatchShape:
    """Sequence lengths and optimizer steps of one rollout, checked against what Miles can train."""

    ctx: int  # train.seq_len: the context (prompt + response) of every sample
    response: int  # rl.response_tokens.max
    steps_per_rollout: int  # optimizer steps per rollout: responses / global_batch
    notes: tuple[str, ...] = ()


def check_algorithm(rl: RLSpec, src: str) -> None:
    """Miles runs GRPO and PPO; its PPO (`--advantage-estimator ppo`) builds the critic itself from the actor's
    arguments on the actor's GPUs (miles_validate_args, create_placement_groups): nothing in a plan can ask for
    another critic placement, so none is refused here."""
    if rl.algorithm not in ("grpo", "ppo"):
        raise fail(src, "rl.algorithm", f"{rl.algorithm!r}: the miles backend builds grpo and ppo launches")


def batch_shape(plan: Plan, sc: Scenario, src: str) -> BatchShape:
    rl, t = plan.rl, plan.train
    assert rl is not None
    ctx = t.seq_len
    resp = rl.response_tokens.max
    if resp >= ctx:
        raise fail(src, "train.seq_len", f"the context length ({ctx}) must exceed the max response "
                   f"({resp}) to leave room for the prompt")
    responses = rl.responses_per_step
    if responses % t.global_batch:
        raise fail(src, "train.global_batch", f"prompts_per_step x samples_per_prompt = {responses} must be a "
                   f"multiple of global_batch ({t.global_batch}): Miles trains num_steps_per_rollout = "
                   "responses / global_batch optimizer steps per rollout")
    notes: tuple[str, ...] = ()
    if rl.prompts_per_step % (t.micro_batch * sc.dp) and t.max_tokens_per_gpu is None:
        group = t.micro_batch * sc.dp
        notes = (f"rollout batch {rl.prompts_per_step} is not a multiple of micro_batch x dp = {group}",)
    return BatchShape(ctx, resp, responses // t.global_batch, notes)


def data_args(rl: RLSpec, t: TrainSpec, opts: MilesOptions, batch: BatchShape, fully_async: bool) -> ArgGroup:
    """The rollout function, the prompt data and reward, and the rollout / train batch sizes."""
    a: list[str] = []
    if fully_async:
        a += ["--rollout-function-path", FULLY_ASYNC_ROLLOUT_FUNCTION]
        if rl.off_policy_steps > 1:  # k steps' trajectories generating at once, none older than k versions
            a += ["--max-weight-staleness", str(rl.off_policy_steps),
                  "--async-max-concurrent-samples", str(rl.off_policy_steps * rl.responses_per_step)]
    a += ["--prompt-data", opts.prompt_data or f"{opts.data_dir}/dapo-math-17k/dapo-math-17k.jsonl",
          "--input-key", opts.input_key, "--label-key", opts.label_key]
    if opts.apply_chat_template:
        a += ["--apply-chat-template"]
        if opts.apply_chat_template_kwargs:
            a += ["--apply-chat-template-kwargs", json.dumps(opts.apply_chat_template_kwargs, separators=(",", ":"))]
    if opts.rollout_shuffle:
        a += ["--rollout-shuffle"]
    a += ["--rm-type", opts.rm_type,
          "--num-rollout", str(opts.num_rollout),
          "--rollout-batch-size", str(rl.prompts_per_step),
          "--n-samples-per-prompt", str(rl.samples_per_prompt),
          "--rollout-max-context-len", str(batch.ctx),
          "--rollout-max-prompt-len", str(batch.ctx - batch.response),
          "--rollout-max-response-len", str(batch.response),
          "--rollout-temperature", fmt(opts.rollout_temperature),
          "--num-steps-per-rollout", str(batch.steps_per_rollout),
          "--global-batch-size", str(t.global_batch)]
    if opts.balance_data:
        a += ["--balance-data"]
    if opts.log_passrate:
        a += ["--log-passrate"]
    if rl.async_:
        a += ["--pause-generation-mode", opts.pause_generation_mode]
    if opts.over_sampling_batch_size:
        a += ["--over-sampling-batch-size", str(opts.over_sampling_batch_size)]
    if opts.dynamic_sampling_filter_path:
        a += ["--dynamic-sampling-filter-path", opts.dynamic_sampling_filter_path]
    return ArgGroup(a)


def optimizer_args(t: TrainSpec, opts: MilesOptions) -> ArgGroup:
    a = ["--optimizer", "adam", "--lr", fmt(opts.lr), "--lr-decay-style", opts.lr_decay_style,
         "--weight-decay", fmt(opts.weight_decay), "--adam-beta1", fmt(opts.adam_beta1),
         "--adam-beta2", fmt(opts.adam_beta2)]
    if t.optimizer_offload_fraction > 0:
        a += ["--optimizer-cpu-offload", "--use-precision-aware-optimizer", "--overlap-cpu-optimizer-d2h-h2d",
              "--optimizer-offload-fraction", fmt(t.optimizer_offload_fraction)]
    return ArgGroup(a)


def algorithm_args(rl: RLSpec, opts: MilesOptions) -> ArgGroup:
    """The policy loss (GRPO or PPO) and, for PPO, the critic Miles trains beside the actor. Miles' PPO asserts
    kl_coef == 0 (a KL penalty goes through --use-kl-loss), which the launch never sets."""
    g = ArgGroup(["--advantage-estimator", rl.algorithm, "--kl-loss-coef", fmt(opts.kl_loss_coef), "--kl-loss-type",
                  opts.kl_loss_type, "--entropy-coef", fmt(opts.entropy_coef), "--eps-clip", fmt(opts.eps_clip),
                  "--eps-clip-high", fmt(opts.eps_clip_high)])
    if rl.algorithm == "ppo":
        g.args += ["--value-clip", fmt(opts.value_clip), "--gamma", fmt(opts.gamma), "--lambd", fmt(opts.lambd),
                   "--critic-lr", fmt(opts.critic_lr if opts.critic_lr is not None else opts.lr),
                   "--num-critic-only-steps", str(opts.num_critic_only_steps)]
        if opts.critic_load:
            g.args += ["--critic-load", opts.critic_load]
        if opts.normalize_advantages:
            g.args += ["--normalize-advantages"]
        g.notes.append("ppo: Miles builds the critic from the actor's model with a value head, on the actor's GPUs, "
                       "and offloads both between their passes (offload_train)")
    if rl.log_probs.ref_model:
        g.args += ["--use-kl-loss"]
        if opts.kl_loss_coef == 0:
            g.notes.append("rl.log_probs.ref_model is true with kl_loss_coef 0: the reference pass runs, its loss "
                           "weighs 0")
    if opts.use_tis:
        g.args += ["--use-tis"]
    return g


def step_behaviour_args(rl: RLSpec, opts: MilesOptions) -> ArgGroup:
    """Switches on how a step runs: the weights backup (needed only for a reference model), determinism, R3."""
    a: list[str] = []
    if not rl.log_probs.ref_model and rl.algorithm != "ppo":  # PPO: actor and critic swap on the same GPUs
        a += ["--disable-weights-backuper"]
    if opts.deterministic:
        a += ["--deterministic-mode"]
    if opts.rollout_routing_replay:
        a += ["--use-rollout-routing-replay", "--use-miles-router"]
    if opts.debug_rollout_only:  # no Megatron actor is allocated: only the rollout GPUs are used
        a += ["--debug-rollout-only"]
    return ArgGroup(a)


def eval_args(opts: MilesOptions, src: str) -> ArgGroup:
    a: list[str] = []
    if opts.eval_interval:
        if not opts.eval_prompt_data:
            raise fail(src, "executor.options.eval_prompt_data", "eval_interval needs eval_prompt_data (name: path)")
        a += ["--eval-interval", str(opts.eval_interval)]
        if opts.eval_top_p is not None:
            a += ["--eval-top-p", fmt(opts.eval_top_p)]
        if opts.eval_function_path:
            a += ["--eval-function-path", opts.eval_function_path]
        a += ["--eval-prompt-data"]
        for name, path in opts.eval_prompt_data.items():
            a += [name, path]
        a += ["--n-samples-per-eval-prompt", str(opts.n_samples_per_eval_prompt)]
        if opts.eval_max_response_len:
            a += ["--eval-max-response-len", str(opts.eval_max_response_len)]
    return ArgGroup(a)
