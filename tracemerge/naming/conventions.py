"""Each framework's naming conventions for its trace files, as data: one :class:`Convention` per
way of naming (the file-name pattern, the folder pattern, the role every such file has), verl's
discrete-mode stages and the phase and role each is, and the files that must be exported before
they can be read (:data:`NEEDS_EXPORT`).

Nothing here reads a path: :mod:`tracemerge.naming.paths` applies these, trying :data:`CONVENTIONS` on
a file name in order (the first match wins) and :data:`ENGINES` on the files inside an engine
replica's folder. Each convention names the framework source it follows.
"""

from __future__ import annotations

import re

import msgspec

# verl's discrete-mode stages (file-name scopes, and the stage folders of older verl and of verl on
# Ascend) and the phase each is, as the verl phase preset names it. ``train`` is a whole step.
STAGE_PHASES = {
    "actor-update": "update_actor",
    "actor_update": "update_actor",
    "update_actor": "update_actor",
    "actor-compute-log-prob": "old_log_prob",
    "actor_compute_log_prob": "old_log_prob",
    "compute_log_prob": "old_log_prob",
    "ref-compute-log-prob": "ref",
    "ref_compute_log_prob": "ref",
    "compute_ref_log_prob": "ref",
    "critic-update": "update_critic",
    "critic_update": "update_critic",
    "update_critic": "update_critic",
    "compute-values": "values",
    "compute_values": "values",
    "generate-sequences": "generate",
    "generate_sequences": "generate",
    "train-batch": "train_batch",
    "train_batch": "train_batch",
    "forward-backward": "forward_backward",
    "forward_backward": "forward_backward",
}
WHOLE_STEP_SCOPES = frozenset({"train"})
# slime's --profile-target: the profiler window of a target spans as many steps as its schedule is
# active (prof.step() per rollout), so the target is the file's stage but no phase over its extent.
SLIME_TARGETS = ("train_overall", "train_actor", "train_log_probs")
WINDOW_SCOPES = WHOLE_STEP_SCOPES | frozenset(SLIME_TARGETS)
# The role that runs a stage, for stage folders that name no role (verl's worker of that stage).
STAGE_ROLES = {"update_actor": "actor", "old_log_prob": "actor", "ref": "ref", "update_critic": "critic"}
STAGE_ROLES |= {"values": "critic", "generate": "rollout"}


class Convention(msgspec.Struct, frozen=True):
    """One framework's naming rule: ``file`` must match the whole file name; ``folder``, matched
    against the name of the folder holding it, adds what that folder says. Named groups: role,
    rank, step, stage, world, tp, pp, dp, cp, ep, replica, local (a rank inside an engine
    replica), host, pid, action (a profiled action's id), engine (an engine's own file name, read
    again by the engine conventions)."""

    name: str
    source: str  # where the framework writes it
    file: re.Pattern[str]
    folder: re.Pattern[str] | None = None
    role: str | None = None  # the role every such file has
    # The folders ``folder`` must lie in to name a role (AReaL's tracer folders); () for any
    # folder below the input. A role word names its role anywhere.
    folder_under: tuple[str, ...] = ()
    names_win: bool = False
    frontend: bool = False


_FIELD = r"[0-9A-Za-z.=+-]+"  # a verl name field: anything else became "-"
_GZ = r"(?:\.gz)?"
_TORCH_TAIL = rf"\.(?P<time>\d+)\.pt\.trace\.json{_GZ}"

VERL_TORCH = Convention(
    "verl torch",
    "verl/utils/profiler/torch_profile.py build_trace_basename",
    re.compile(
        rf"(?:(?P<role>{_FIELD})_)??"
        rf"(?:(?P<stage>train|{'|'.join(re.escape(s) for s in STAGE_PHASES if '-' in s)})_)?"
        r"(?:step(?P<step>\d+)_)?rank(?P<rank>\d+)(?:-of-(?P<world>\d+))?"
        r"(?:_tp(?P<tp>\d+)-pp(?P<pp>\d+)-dp(?P<dp>\d+)-cp(?P<cp>\d+))?"
        rf"_pid(?P<pid>\d+)_(?P<time>\d{{17}})(?:_mb\d+(?:-\d+)?|_part\d+)?\.json{_GZ}"
    ),
    names_win=True,
)
VERL_OLD = Convention(
    "verl torch (early 2026)",
    "<save_path>/<stage>/[<role>_]prof_rank-<r>[_<pid>_<ts17>].json.gz",
    re.compile(rf"(?:(?P<role>.+?)_)?prof_rank-(?P<rank>\d+)(?:_(?P<pid>\d+)_(?P<time>\d{{17}}))?\.json{_GZ}"),
    re.compile(r"(?P<stage>.+)"),
    names_win=True,
)
# The folder a rollout replica's engine writes into (its files keep the engine's own names, read
# by ENGINES): verl's agent_loop_rollout_replica_<n>, and since verl PR #7928 the replica's Ray
# actor name, vllm_server_[teacher_|reward_][prefill_|decode_]<replica>_<node>[_<key>] (or
# sglang_server_…): a teacher model for on-policy distillation, a generative reward model, the
# prefill and decode servers of disaggregated serving. Named groups: role (else rollout), replica,
# node, serving (prefill or decode, shown in the label).
REPLICA_FOLDER = re.compile(r"agent_loop_rollout_replica_(?P<replica>\d+)")
SERVER_FOLDER = re.compile(
    r"(?:vllm|sglang|trtllm)_server(?:_(?P<role>teacher|reward))?(?:_(?P<serving>prefill|decode))?"
    r"_(?P<replica>\d+)_(?P<node>\d+)(?:_[0-9A-Za-z.=+-]+)?"
)
ENGINE_FOLDERS = (REPLICA_FOLDER, SERVER_FOLDER)
ENGINE_ROLE = "rollout"  # the role of an engine folder that names none
VERL_RELOCATED = Convention(
    "verl rollout (relocated)",
    "verl relocate_results: rollout-replica<n>[-globalrank<g>]_<engine file>",
    re.compile(r"rollout-replica(?P<replica>\d+)(?:-globalrank(?P<rank>\d+))?_(?P<engine>.+)"),
    role="rollout",
    names_win=True,
)
# The engines' own names, inside a replica's folder (or after the relocated prefix).
VLLM_WORKER = Convention(
    "vLLM worker",
    "vLLM torch profiler: <5-char id>-rank-<k>.<time_ns>.pt.trace.json.gz",
    re.compile(rf"(?P<id>[0-9A-Za-z]+)-rank-(?P<local>\d+){_TORCH_TAIL}"),
)
VLLM_FRONTEND = Convention(
    "vLLM frontend",
    "vLLM AsyncLLM profiler: <host>_<pid>.async_llm.<time_ns>.pt.trace.json.gz",
    re.compile(rf"(?P<host>.+)_(?P<pid>\d+)\.async_llm{_TORCH_TAIL}"),
    frontend=True,
)
VLLM_WORKER_OLD = Convention(
    "vLLM worker (older)",
    "older vLLM: <host>_<pid>.<time_ns>.pt.trace.json.gz",
    re.compile(rf"(?P<host>.+)_(?P<pid>\d+){_TORCH_TAIL}"),
)
SGLANG = Convention(
    "SGLang",
    "SGLang profiler: <time.time()>-TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>][-<stage>].trace.json.gz",
    re.compile(
        r"(?P<time>\d+(?:\.\d+)?)-TP-(?P<tp>\d+)(?:-DP-(?P<dp>\d+))?(?:-PP-(?P<pp>\d+))?(?:-EP-(?P<ep>\d+))?"
        rf"(?:-(?P<engine_stage>EXTEND|DECODE|prefill|decode))?\.trace\.json{_GZ}"
    ),
)
ENGINES = (VLLM_FRONTEND, VLLM_WORKER, SGLANG, VLLM_WORKER_OLD)
ENGINE_STAGE = "generate_sequences"
SKYRL = Convention(
    "SkyRL",
    "SkyRL policy workers: <save_path>/rank<r>.<time_ns>.pt.trace.json",
    re.compile(rf"rank(?P<rank>\d+){_TORCH_TAIL}"),
    role="policy",
)
AREAL = Convention(
    "AReaL",
    "<fileroot>/logs/<user>/<experiment>/<trial>/{perf,session}_tracer/<role>/{traces,sessions}-r<rank>.jsonl",
    re.compile(r"(?:traces|sessions)-r(?P<rank>\d+)\.jsonl"),
    re.compile(r"(?P<role>.+)"),
    folder_under=("perf_tracer", "session_tracer"),
)
SLIME = Convention(
    "slime",
    "slime/utils/profile_utils.py: <tensorboard_dir>/<target>_rank_<r>.<ms>.pt.trace.json.gz",
    re.compile(rf"(?P<stage>{'|'.join(SLIME_TARGETS)})_rank_(?P<rank>\d+)\.(?P<time>\d+)\.pt\.trace\.json{_GZ}"),
    role="actor",  # slime's training group (its Megatron actor) runs every target
    names_win=True,
)
VERL_ASCEND_RUN = re.compile(r"(?P<host>.+)_(?P<pid>\d+)_(?P<time>\d{17})_ascend_pt")
# Ray's nsight plugin names a worker's report worker_process_<pid>[.<rid>].nsys-rep (discrete mode:
# one <rid> per profiled action); verl relocates it with its role (not sanitised: it may hold "_")
# and host; its exports (nsys export --type sqlite or jsonlines) keep the name.
VERL_NSYS = Convention(
    "verl nsys",
    "verl nsys: [[<role>_]<host>_]worker_process_<pid>[.<rid>].nsys-rep (or its .sqlite, .jsonl export)",
    re.compile(
        r"(?:(?:(?P<role>.+)_)?(?P<host>[^_]+)_)?worker_process_(?P<pid>\d+)(?:\.(?P<action>\d+))?"
        r"\.(?:nsys-rep|sqlite|jsonl)"
    ),
)
# Files a framework writes that tracemerge reads only once exported: named with what to do, never
# ignored (an Nsight Systems report is exported by nsys when it is on PATH).
NEEDS_EXPORT = {
    ".nsys-rep": "an Nsight Systems report: export it first with nsys export --type sqlite -o {export} {name}",
}
# Conventions tried on a file name, first match wins (engines are tried only inside a replica).
CONVENTIONS = (VERL_TORCH, VERL_RELOCATED, VERL_OLD, SLIME, SKYRL, AREAL, VERL_NSYS)
