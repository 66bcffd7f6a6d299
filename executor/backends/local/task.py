"""Small verifiable tasks with an exact, rule-based reward, for a random-init character-level model.

A prompt is `<s>` + its text; the answer is a short string. The reward is 1.0 when the response starts with
the answer (what follows it is ignored; the response is at most `rl.response_tokens.max` tokens) and 0.0
otherwise: correctness only, no reward for format. Single-character answers give a random-init model a
1/64 chance per sample, so GRPO groups of 8 see successes from the first step.

- add:     "3+4=" -> "7", single digits with a one-digit sum (55 prompts)
- add_mod: "8+5=" -> "3", (a + b) mod 10 over all 100 pairs
- copy:    "7=" -> "7"
- reverse: "abc>" -> "cba", three letters from a-e (harder: 1/64^3 at random)
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from executor.backends.local.tokenizer import BOS_ID, encode

TaskName = Literal["add", "add_mod", "copy", "reverse"]


@dataclass(frozen=True)
class Prompt:
    text: str
    answer: str

    @property
    def token_ids(self) -> list[int]:
        return [BOS_ID, *encode(self.text)]


def make_prompt(task: TaskName, rng: random.Random) -> Prompt:
    if task == "add":
        a = rng.randint(0, 9)
        b = rng.randint(0, 9 - a)
        return Prompt(f"{a}+{b}=", str(a + b))
    if task == "add_mod":
        a, b = rng.randint(0, 9), rng.randint(0, 9)
        return Prompt(f"{a}+{b}=", str((a + b) % 10))
    if task == "copy":
        d = str(rng.randint(0, 9))
        return Prompt(f"{d}=", d)
    if task == "reverse":
        s = "".join(rng.choice("abcde") for _ in range(3))
        return Prompt(f"{s}>", s[::-1])
    raise ValueError(f"unknown task {task!r}")


def sample_prompts(task: TaskName, rng: random.Random, n: int) -> list[Prompt]:
    return [make_prompt(task, rng) for _ in range(n)]


def reward(response: str, answer: str) -> float:
    """1.0 if the response starts with the exact answer, else 0.0."""
    return 1.0 if response[: len(answer)] == answer else 0.0
