"""Each framework's file and folder names, as it writes them today, and what each must become."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracemerge.naming.apart import tell_apart
from tracemerge.naming.paths import (
    PathFacts,
    ascend_run_facts,
    host_from_name,
    join_frontends,
    needs_export,
    path_facts,
    role_sort_key,
)

ROOT = Path("/save")


def facts(*names: str) -> dict[str, PathFacts]:
    found = {ROOT / name: path_facts(ROOT / name, ROOT) for name in names}
    return {str(path.relative_to(ROOT)): f for path, f in join_frontends(found).items()}


def brief(f: PathFacts) -> tuple:
    return (f.role, f.rank, f.label, f.step, f.phase, dict(f.coords))


# verl/utils/profiler/torch_profile.py build_trace_basename: [<role>_][<scope>_][step<S>_]rank<r>
# [-of-<world>][_tp<a>-pp<b>-dp<c>-cp<d>]_pid<pid>_<ts17> + [_mb<A>[-<B>] | _part<N>] + .json.gz
VERL_TORCH = {
    "actor-rollout-ref_train_step2_rank0-of-4_tp0-pp0-dp0-cp0_pid41234_20261201120000123.json.gz": (
        "actor-rollout-ref",
        0,
        None,
        2,
        None,
        {"tp": 0, "pp": 0, "dp": 0, "cp": 0, "world": 4},
    ),
    "actor-rollout-ref_train_step2_rank3-of-4_tp1-pp0-dp1-cp0_pid41237_20261201120000456.json.gz": (
        "actor-rollout-ref",
        3,
        None,
        2,
        None,
        {"tp": 1, "pp": 0, "dp": 1, "cp": 0, "world": 4},
    ),
    "actor_actor-update_step3_rank1-of-2_tp0-pp0-dp1-cp0_pid7_20261201120000123_mb0-3.json.gz": (
        "actor",
        1,
        None,
        3,
        "update_actor",
        {"tp": 0, "pp": 0, "dp": 1, "cp": 0, "world": 2},
    ),
    "actor_actor-compute-log-prob_step3_rank0-of-2_pid7_20261201120000123_mb2.json.gz": (
        "actor",
        0,
        None,
        3,
        "old_log_prob",
        {"world": 2},
    ),
    "ref_ref-compute-log-prob_step3_rank1_pid9_20261201120000123_part1.json.gz": ("ref", 1, None, 3, "ref", {}),
    "value-model_forward-backward_step1_rank0_pid1_20261201120000123.json.gz": (
        "value-model",
        0,
        None,
        1,
        "forward_backward",
        {},
    ),
    "language-model_step5_rank12-of-16_pid1_20261201120000123.json.gz": (
        "language-model",
        12,
        None,
        5,
        None,
        {"world": 16},
    ),
    # no role, no step: the process is told by its rank alone
    "rank0_pid41234_20261201120000123.json.gz": (None, 0, None, None, None, {}),
    "train-batch_rank2_pid5_20261201120000123.json.gz": (None, 2, None, None, "train_batch", {}),
}


@pytest.mark.parametrize("name", VERL_TORCH)
def test_verl_training_worker_names(name: str) -> None:
    assert brief(facts(name)[name]) == VERL_TORCH[name]
    assert facts(name)[name].names_win  # distributedInfo.rank agrees; the name is the rule


def test_verl_scope_without_role_is_a_stage_run_by_its_role() -> None:
    name = "actor-update_step4_rank1_pid5_20261201120000123.json.gz"
    assert brief(facts(name)[name]) == ("actor", 1, None, 4, "update_actor", {})


# Rollout replicas: <save_path>/agent_loop_rollout_replica_<n>/ with the engines' own names, or
# moved up into save_path as rollout-replica<n>[-globalrank<g>]_<engine name>.
REPLICAS = {
    "agent_loop_rollout_replica_0/a1b2c-rank-0.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        None,
        "replica 0 · tp 0",
        {"replica": 0, "tp": 0},
    ),
    "agent_loop_rollout_replica_0/a1b2c-rank-1.1764590400123456790.pt.trace.json.gz": (
        "rollout",
        None,
        "replica 0 · tp 1",
        {"replica": 0, "tp": 1},
    ),
    # vLLM's CPU frontend joins its replica's first GPU
    "agent_loop_rollout_replica_0/node-3_51234.async_llm.1764590400123456791.pt.trace.json.gz": (
        "rollout",
        None,
        "replica 0 · tp 0",
        {"replica": 0, "tp": 0},
    ),
    # older vLLM: <host>_<pid>; the local rank is only in the file (distributedInfo.rank)
    "agent_loop_rollout_replica_1/node-3_51240.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        None,
        "replica 1 · node-3_51240",
        {"replica": 1},
    ),
    "agent_loop_rollout_replica_10/f0f0f-rank-0.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        None,
        "replica 10 · tp 0",
        {"replica": 10, "tp": 0},
    ),
    # SGLang: <time.time()>-TP-<t>[-DP-<d>][-PP-<p>][-EP-<e>][-<stage>].trace.json.gz
    "agent_loop_rollout_replica_2/1764590400.1234567-TP-1-DP-0-EXTEND.trace.json.gz": (
        "rollout",
        None,
        "replica 2 · tp 1",
        {"replica": 2, "tp": 1, "dp": 0},
    ),
    "agent_loop_rollout_replica_2/1764590401.5-TP-1-DP-0-DECODE.trace.json.gz": (
        "rollout",
        None,
        "replica 2 · tp 1",
        {"replica": 2, "tp": 1, "dp": 0},
    ),
    "agent_loop_rollout_replica_2/1764590401.5-TP-0-DP-1-PP-1-EP-2-prefill.trace.json.gz": (
        "rollout",
        None,
        "replica 2 · tp 0 · pp 1 · dp 1 · ep 2",
        {"replica": 2, "tp": 0, "pp": 1, "dp": 1, "ep": 2},
    ),
    "agent_loop_rollout_replica_2/1764590401-TP-3.trace.json.gz": (
        "rollout",
        None,
        "replica 2 · tp 3",
        {"replica": 2, "tp": 3},
    ),
    # relocated: the global rank g = n × world + local rank, when the local rank is known
    "rollout-replica3-globalrank6_a1b2c-rank-0.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        6,
        None,
        {"replica": 3, "tp": 0},
    ),
    "rollout-replica3-globalrank7_a1b2c-rank-1.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        7,
        None,
        {"replica": 3, "tp": 1},
    ),
    "rollout-replica3_node-3_51299.async_llm.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        6,
        None,
        {"replica": 3, "tp": 0},
    ),
    "rollout-replica4-globalrank9_1764590400.25-TP-1.trace.json.gz": ("rollout", 9, None, {"replica": 4, "tp": 1}),
    # a frontend whose replica left no GPU trace
    "rollout-replica5_node-3_51300.async_llm.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        None,
        "replica 5 · frontend",
        {"replica": 5},
    ),
}


def test_rollout_replica_engine_names() -> None:
    found = facts(*REPLICAS)
    assert {name: (f.role, f.rank, f.label, dict(f.coords)) for name, f in found.items()} == REPLICAS
    assert all(f.names_win for f in found.values())  # an engine's distributedInfo.rank is its local rank


def test_older_vllm_label_takes_the_files_own_local_rank() -> None:
    name = "agent_loop_rollout_replica_1/node-3_51240.1764590400123456789.pt.trace.json.gz"
    assert facts(name)[name].file_rank_label == "replica 1 · tp {}"


# Older verl (early 2026): <save_path>/<stage>/[<role>_]prof_rank-<r>[_<pid>_<ts17>].json.gz
OLD_VERL = {
    "actor_update/actor_prof_rank-1_4242_20260101120000123.json.gz": ("actor", 1, None, None, "update_actor", {}),
    "compute_log_prob/prof_rank-0.json.gz": ("actor", 0, None, None, "old_log_prob", {}),
    "ref_compute_log_prob/ref_prof_rank-3_77_20260101120000123.json.gz": ("ref", 3, None, None, "ref", {}),
    "actor_rollout_ref_prof_rank-2.json.gz": ("actor_rollout_ref", 2, None, None, None, {}),
    "actor/prof_rank-0.json.gz": ("actor", 0, None, None, None, {}),
}


@pytest.mark.parametrize("name", OLD_VERL)
def test_older_verl_stage_folders(name: str) -> None:
    assert brief(facts(name)[name]) == OLD_VERL[name]


def test_skyrl_and_areal_names() -> None:
    found = facts(
        "rank0.1764590400123456789.pt.trace.json",
        "rank1.1764590400123456999.pt.trace.json",
        "logs/alice/gsm8k/trial0/perf_tracer/eval-rollout/traces-r3.jsonl",
        "logs/alice/gsm8k/trial0/session_tracer/rollout/sessions-r1.jsonl",
        "logs/alice/gsm8k/trial0/perf_tracer/master/traces-r0.jsonl",
    )
    assert [(f.role, f.rank, f.convention) for f in found.values()] == [
        ("policy", 0, "SkyRL"),
        ("policy", 1, "SkyRL"),
        ("eval-rollout", 3, "AReaL"),
        ("rollout", 1, "AReaL"),
        ("master", 0, "AReaL"),
    ]


def test_verl_ascend_run_folders(tmp_path: Path) -> None:
    run = "node1_4242_20261201120000123_ascend_pt"
    for where, expected in {
        f"save/actor/{run}": ("actor", None, None),
        f"save/actor_update/{run}": ("actor", None, "update_actor"),  # discrete mode: a stage folder
        f"save/12/ref/{run}": ("ref", 12, None),  # older verl: a step folder above the role
        f"save/{run}": (None, None, None),  # the folder given names the job, not a role
        f"save/myjob/{run}": (None, None, None),  # nor does a folder of the job's below it
        # RL-Insight's sample of verl on Ascend: mstx_profile/<stage>/<run>
        f"save/mstx_profile/actor_compute_log_prob/{run}": ("actor", None, "old_log_prob"),
        f"save/mstx_profile/ref_compute_log_prob/{run}": ("ref", None, "ref"),
        f"save/mstx_profile/actor_update/{run}": ("actor", None, "update_actor"),
        f"save/mstx_profile/train_batch/{run}": (None, None, "train_batch"),  # no role runs it alone
        f"save/mstx_profile/forward_backward/{run}": (None, None, "forward_backward"),
    }.items():
        f = ascend_run_facts(tmp_path / where, tmp_path / "save")
        assert (f.role, f.step, f.phase) == expected, where
        assert f.convention == "verl Ascend"
        assert (f.host, f.pid) == ("node1", 4242)


def test_an_ascend_engine_run_is_its_replica_gpu(tmp_path: Path) -> None:
    run = "node1_4242_20261201120000123_ascend_pt"
    for folder, (role, label, coords) in {
        "agent_loop_rollout_replica_0": ("rollout", "replica 0 · tp {}", {"replica": 0}),
        "vllm_server_teacher_1_0_a1b2": ("teacher", "replica 1 · tp {}", {"replica": 1, "node": 0}),
        "vllm_server_decode_2_1": ("rollout", "replica 2 · decode · node 1 · tp {}", {"replica": 2, "node": 1}),
    }.items():
        f = ascend_run_facts(tmp_path / "mstx_profile" / folder / run, tmp_path / "mstx_profile")
        assert (f.role, f.rank, f.file_rank_label, dict(f.coords), f.phase) == (role, None, label, coords, "generate")
        assert f.names_win  # profiler_info's rank is the engine-local rank
        # the run folder given alone: its replica folder still speaks for it
        alone = ascend_run_facts(tmp_path / "mstx_profile" / folder / run, tmp_path / "mstx_profile" / folder / run)
        assert alone == f


# verl PR #7928: a replica's folder is its Ray actor's name (engine file names inside as before).
SERVERS = {
    "vllm_server_0_0_k3f9/a1b2c-rank-0.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        "replica 0 · tp 0",
        {"replica": 0, "node": 0, "tp": 0},
    ),
    "vllm_server_0_0_k3f9/a1b2c-rank-1.1764590400123456790.pt.trace.json.gz": (
        "rollout",
        "replica 0 · tp 1",
        {"replica": 0, "node": 0, "tp": 1},
    ),
    # the frontend joins its own folder's first GPU
    "vllm_server_0_0_k3f9/node-3_51234.async_llm.1764590400123456791.pt.trace.json.gz": (
        "rollout",
        "replica 0 · tp 0",
        {"replica": 0, "node": 0, "tp": 0},
    ),
    "vllm_server_1_1_k3f9/c3d4e-rank-0.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        "replica 1 · node 1 · tp 0",
        {"replica": 1, "node": 1, "tp": 0},
    ),
    "sglang_server_2_0_x7/1764590401.5-TP-1-DP-0-DECODE.trace.json.gz": (
        "rollout",
        "replica 2 · tp 1",
        {"replica": 2, "node": 0, "tp": 1, "dp": 0},
    ),
    # on-policy distillation's teacher, and its frontend without a GPU trace beside it
    "vllm_server_teacher_0_0_q8/f0f0f-rank-0.1764590400123456789.pt.trace.json.gz": (
        "teacher",
        "replica 0 · tp 0",
        {"replica": 0, "node": 0, "tp": 0},
    ),
    "vllm_server_teacher_1_0_q8/node-4_6001.async_llm.1764590400123456789.pt.trace.json.gz": (
        "teacher",
        "replica 1 · frontend",
        {"replica": 1, "node": 0},
    ),
    # a generative reward model
    "vllm_server_reward_0_0_z1/node-5_7001.1764590400123456789.pt.trace.json.gz": (
        "reward",
        "replica 0 · node-5_7001",
        {"replica": 0, "node": 0},
    ),
    # disaggregated serving: prefill and decode servers of replica 0
    "vllm_server_prefill_0_0/p1p1p-rank-0.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        "replica 0 · prefill · tp 0",
        {"replica": 0, "node": 0, "tp": 0},
    ),
    "vllm_server_decode_0_1/d1d1d-rank-0.1764590400123456789.pt.trace.json.gz": (
        "rollout",
        "replica 0 · decode · node 1 · tp 0",
        {"replica": 0, "node": 1, "tp": 0},
    ),
}


def test_ray_actor_named_rollout_folders() -> None:
    found = facts(*SERVERS)
    assert {name: (f.role, f.label, dict(f.coords)) for name, f in found.items()} == SERVERS
    assert all(f.rank is None and f.names_win and f.phase == "generate" for f in found.values())


def test_a_folder_named_like_a_server_but_not_one_is_no_replica() -> None:
    name = "vllm_server_x/rank3.json"  # no replica and node numbers: the generic reading
    assert (facts(name)[name].rank, facts(name)[name].label, facts(name)[name].coords) == (3, None, ())


# slime --use-pytorch-profiler: <tensorboard_dir>/<target>_rank_<r>.<ms>.pt.trace.json.gz
SLIME = {
    "train_overall_rank_0.1764590400123.pt.trace.json.gz": ("actor", 0, "train_overall"),
    "train_actor_rank_3.1764590400456.pt.trace.json.gz": ("actor", 3, "train_actor"),
    "train_log_probs_rank_12.1764590400789.pt.trace.json.gz": ("actor", 12, "train_log_probs"),
}


def test_slime_profile_targets() -> None:
    found = facts(*(f"tb/{name}" for name in SLIME))
    assert {name.removeprefix("tb/"): (f.role, f.rank, f.stage) for name, f in found.items()} == SLIME
    # a target's window spans as many steps as the schedule is active: no phase over the file
    assert all(f.phase is None and f.convention == "slime" and f.names_win for f in found.values())
    assert all(host_from_name(name) is None for name in SLIME)  # "train_actor_rank" is no host
    assert host_from_name("node-7_4242.1764590400123.pt.trace.json.gz") == "node-7"


# Ray's nsight reports of verl's workers, relocated with role and host, and their exports.
NSYS = {
    "worker_process_4242.nsys-rep": (None, None, 4242, None),
    "worker_process_4242.3.nsys-rep": (None, None, 4242, 3),
    "worker_process_4242.3.jsonl": (None, None, 4242, 3),
    "worker_process_4242.3.sqlite": (None, None, 4242, 3),
    "actor_rollout_ref_node-1_worker_process_4242.12.nsys-rep": ("actor_rollout_ref", "node-1", 4242, 12),
    "critic_node-2_worker_process_77.1.jsonl": ("critic", "node-2", 77, 1),
    "node-2_worker_process_77.sqlite": (None, "node-2", 77, None),
}


def test_verl_nsys_report_names() -> None:
    found = facts(*NSYS)
    assert {name: (f.role, f.host, f.pid, f.action) for name, f in found.items()} == NSYS
    assert {f.convention for f in found.values()} == {"verl nsys"}


def test_nsys_reports_are_named_with_the_export_command() -> None:
    name = "actor_rollout_ref_node1_worker_process_4242.3.nsys-rep"
    assert facts(name)[name].role == "actor_rollout_ref"
    assert needs_export(ROOT / name) == (
        "an Nsight Systems report: export it first with nsys export --type sqlite "
        "-o actor_rollout_ref_node1_worker_process_4242.3.sqlite actor_rollout_ref_node1_worker_process_4242.3.nsys-rep"
    )


def test_roles_sort_in_the_order_of_an_rl_step() -> None:
    roles = ["master", "actor", "zeta", "critic", "ref", "reward", "rollout", "actor-rollout-ref", "alpha"]
    assert sorted(roles, key=role_sort_key) == [
        "rollout",
        "actor-rollout-ref",
        "reward",
        "ref",
        "critic",
        "actor",
        "master",
        "alpha",
        "zeta",
    ]


def test_generic_names_keep_their_reading() -> None:
    found = facts("x_rank4.json", "rank7/trace.json", "rollout/rank_2/trace.json", "resnet_r50.json")
    assert [(f.role, f.rank, f.convention) for f in found.values()] == [
        (None, 4, ""),
        (None, 7, ""),
        ("rollout", 2, ""),
        (None, None, ""),
    ]


def test_folders_above_a_verl_save_path_name_no_role_unless_they_read_like_one() -> None:
    name = "train-batch_step3_rank0-of-2_pid48211_20261118140454290.json.gz"
    assert facts(f"myjob/save_path/{name}")[f"myjob/save_path/{name}"].role is None
    assert facts(f"critic/{name}")[f"critic/{name}"].role == "critic"


def test_the_folder_given_speaks_for_its_files() -> None:
    replica = Path("/save/agent_loop_rollout_replica_4")
    f = path_facts(replica / "a1b2c-rank-1.1764590400123456789.pt.trace.json.gz", replica)
    assert (f.role, f.label) == ("rollout", "replica 4 · tp 1")
    stage = Path("/save/actor_update")
    f = path_facts(stage / "prof_rank-3.json.gz", stage)
    assert (f.role, f.rank, f.phase) == ("actor", 3, "update_actor")


def test_an_areal_role_folder_is_one_inside_its_tracer_folder() -> None:
    found = facts(
        "trial0/perf_tracer/gen-server/traces-r1.jsonl",  # any name: AReaL's own role folder
        "trial0/session_tracer/judge/sessions-r0.jsonl",
        "copied/mystuff/traces-r2.jsonl",  # a folder of the user's: no role
        "copied/critic/traces-r3.jsonl",  # a role word names its role anywhere
    )
    assert [(f.role, f.rank, f.convention) for f in found.values()] == [
        ("gen-server", 1, "AReaL"),
        ("judge", 0, "AReaL"),
        (None, 2, "AReaL"),
        ("critic", 3, "AReaL"),
    ]
    given = Path("/logs/trial0/perf_tracer/gen-server")  # the role folder given itself
    assert path_facts(given / "traces-r1.jsonl", given).role == "gen-server"


def test_folders_of_no_known_layout_name_no_role() -> None:
    found = facts(
        "misc/trace.json",
        "experiments/2026-11-30/rank0.json",
        "my_job/profile/worker3.pt.trace.json",
        "my_job/nsys/worker_process_4242.sqlite",  # verl nsys's name, a folder of the user's
        "my_job/critic/trace.json",
    )
    assert [(f.role, f.rank) for f in found.values()] == [
        (None, None),
        (None, 0),
        (None, None),
        (None, None),
        ("critic", None),
    ]


def test_files_of_no_layout_in_several_folders_are_told_apart_by_their_tails() -> None:
    names = [
        "a/trace.json",
        "b/trace.json",
        "b/rank1.json",
        "actor/trace.json",
        "rank0_pid41234_20261201120000123.json",
    ]
    found = {
        str(p.relative_to(ROOT)): f.apart
        for p, f in tell_apart({ROOT / n: path_facts(ROOT / n, ROOT) for n in names}).items()
    }
    # the role folder's file and the verl file follow a layout: nothing to tell apart
    assert found == dict(zip(names, ["a/trace.json", "b/trace.json", "rank1.json", None, None], strict=True))
    one_folder = {ROOT / n: path_facts(ROOT / n, ROOT) for n in ["a/trace.json", "a/rank1.json", "actor/x.json"]}
    assert tell_apart(one_folder) == one_folder  # one folder of them: the rank alone names each
