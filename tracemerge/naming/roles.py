"""Role words, in the order an RL step runs through them, and the folders that name no role.

Data read by :mod:`tracemerge.naming.paths` (a folder names a role only when it reads as one) and
by the process order (:func:`role_sort_key`).
"""

from __future__ import annotations

# Role words in the order an RL step runs through them: generation, reward, reference, critic,
# actor/trainer, then the job's controllers. A role met that is in no group sorts after them all,
# alphabetically. Hybrid verl workers (actor, rollout and ref in one process) generate first.
ROLE_GROUPS: tuple[tuple[str, ...], ...] = (
    ("rollout", "generator", "generation", "inference", "sampler", "eval-rollout", "env"),
    ("actor-rollout-ref", "actor_rollout_ref", "actor-rollout", "actor_rollout"),
    ("reward", "rm", "reward-model"),
    ("ref", "reference", "teacher"),
    ("critic", "value-model", "value"),
    ("actor", "policy", "learner", "trainer", "language-model"),
    ("master", "driver", "controller"),
)
ROLE_WORDS = frozenset(word for group in ROLE_GROUPS for word in group)
_ROLE_RANK = {word: (g, n) for g, group in enumerate(ROLE_GROUPS) for n, word in enumerate(group)}


def role_sort_key(role: str) -> tuple:
    """Where a role's processes sort: pipeline order, unknown roles after, alphabetically."""
    low = role.lower()
    return (*_ROLE_RANK[low], "") if low in _ROLE_RANK else (len(ROLE_GROUPS), 0, low)


# Folders that hold traces without naming a role (the role is the folder below them).
CONTAINER_DIRS = frozenset(
    {
        "perf_tracer",
        "session_tracer",
        "logs",
        "log",
        "traces",
        "trace",
        "profile",
        "profiles",
        "profiler",
        "profiling",
        "outputs",
        "output",
        "tb",
        "tensorboard",
        "torch_profile",
        "save_path",
        "nsight",  # Ray's logs/nsight/: the nsys reports of its workers
    }
)
