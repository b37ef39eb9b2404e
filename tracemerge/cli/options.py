"""The command line's options: those of a merge, and those it shares with ``summary`` (what each
says in ``--help``); and how their values are read into what the engine takes (a ValueError,
which the commands turn into a usage error, says what is wrong)."""

import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from tracemerge.cli import engine
from tracemerge.core.errors import shown

if TYPE_CHECKING:
    from tracemerge.select import Selection

# The placement and phase options a merge and ``summary`` share.
SyncOption = Annotated[
    Optional[list[str]],
    typer.Option("--sync", help="A span that starts at one instant in every process having it (repeatable)."),
]
OffsetOption = Annotated[
    Optional[list[str]],
    typer.Option("--offset", help="Shift a role or rank by hand, e.g. actor/3=+1.5ms (repeatable)."),
]
OffsetsFileOption = Annotated[
    Optional[Path], typer.Option("--offsets", help='TOML file: an offsets table of "actor/3" = "+1.5ms".')
]
NoAlignOption = Annotated[bool, typer.Option("--no-align", help="Keep every file's raw clock.")]
RunOption = Annotated[
    str,
    typer.Option(
        "--run",
        help="Inputs far apart in time are separate runs: latest, all, a run's number (1 the earliest) "
        "or its UTC start, e.g. 2026-10-02T09:57.",
    ),
]
# (None is auto: the rules are loaded when a command runs, not at every start.)
PhasesOption = Annotated[
    Optional[str],
    typer.Option(
        "--phases",
        show_default=False,
        help="Phase rules: auto (the default), verl, areal, skyrl, or a TOML rules file.",
    ),
]
KeepWarmupOption = Annotated[
    bool, typer.Option("--keep-warmup", help="Count the first (warm-up) step in the means as the others.")
]

# A merge's own.
InputsArgument = Annotated[list[Path], typer.Argument(help="Trace files or directories (searched recursively).")]
OutputOption = Annotated[
    str,
    typer.Option("--output", "-o", metavar="FILE", help="Output file: .pftrace, .pftrace.gz, .json or .json.gz."),
]
FormatOption = Annotated[
    Optional[str],
    typer.Option("--format", "-f", help="perfetto, perfetto.gz, json or json.gz (default: from -o)."),
]
ReportOption = Annotated[
    Optional[str],
    typer.Option("--report", metavar="FILE", help="Also write the run report as JSON to this file."),
]
JobsOption = Annotated[
    int, typer.Option("--jobs", "-j", help="Worker processes reading and encoding files (0: automatic).")
]
RayOption = Annotated[
    Optional[str],
    typer.Option(
        "--ray",
        metavar="[ADDRESS]",
        help="Find and process files on the nodes of a Ray cluster: auto, HOST:PORT, ray://HOST:10001; "
        "alone, a Ray instance started here.",
    ),
]
SplitByOption = Annotated[
    Optional[str],
    typer.Option(
        "--split-by",
        help="One trace per role, host, step-window or coordinate (dp, tp, ...), and an index.",
    ),
]
RolesOption = Annotated[Optional[str], typer.Option("--roles", help="Keep only these roles, e.g. actor,rollout.")]
RanksOption = Annotated[Optional[str], typer.Option("--ranks", help="Keep only these ranks, e.g. 0-7,12.")]
WhereOption = Annotated[
    Optional[list[str]],
    typer.Option("--where", help="Keep processes whose file names give these coordinates, e.g. dp=0 (repeatable)."),
]
WindowOption = Annotated[
    Optional[str],
    typer.Option("--window", help="Keep START:END after the run start, e.g. 10s:25s, 500ms:, :2min."),
]
MinDurOption = Annotated[
    Optional[str], typer.Option("--min-dur", help="Leave out slices shorter than this, e.g. 10us.")
]
KeepZeroCountersOption = Annotated[
    bool,
    typer.Option("--keep-zero-counters", help="Keep Ascend counter tracks whose every value is 0 (left out)."),
]
StepsOption = Annotated[
    Optional[str], typer.Option("--steps", help="Keep only these RL steps (and their phases), e.g. 3-5.")
]
SummaryOption = Annotated[bool, typer.Option("--summary", help="Print where each step's time went, per role.")]
MetricsMapOption = Annotated[
    Optional[Path],
    typer.Option("--metrics-map", help="TOML file placing metric series by label under a role/rank."),
]
ForceOption = Annotated[bool, typer.Option("--force", help="Let -o replace one of the inputs.")]
StrictOption = Annotated[
    bool, typer.Option("--strict", help="Write nothing if any file is skipped or any input event lost.")
]
QuietOption = Annotated[bool, typer.Option("--quiet", "-q", help="Print errors only.")]


def jobs_used(jobs: int, ray: str | None) -> tuple[int, list[str]]:
    """``--jobs``: how many processes a merge uses (no more than the CPUs this one may run on,
    unless the files are processed on a Ray cluster), and the note saying it was fewer."""
    if jobs < 0:
        raise ValueError(f"--jobs: {jobs} is not a number of processes (0: one per CPU when it pays)")
    cores = engine.usable_cores()
    if jobs > cores and ray is None:
        return cores, [f"--jobs {jobs}: this machine gives it {cores} CPUs; {cores} processes used"]
    return jobs, []


def output_file(output: str, option: str = "-o", example: str = "merged.pftrace") -> Path:
    """``-o`` (or ``--report``) as a file: a name that ends in a slash or is a directory names a
    folder, not a file to write."""
    path = Path(output)
    if output.endswith(("/", os.sep)) or path.is_dir():
        named = "the trace file" if option == "-o" else "the file"
        raise ValueError(f"{option}: {shown(output)} names a folder; name {named}, e.g. {shown(path / example)}")
    return path


def selection(
    roles: str | None,
    ranks: str | None,
    where: list[str] | None,
    window: str | None,
    min_dur: str | None,
    keep_zero_counters: bool,
) -> "Selection":
    """What to keep, from --roles, --ranks, --where, --window, --min-dur, --keep-zero-counters."""
    if min_dur is not None and engine.parse_duration(min_dur) < 0:
        raise ValueError(f"--min-dur: {min_dur!r} is negative")
    return engine.Selection(
        roles=engine.parse_roles(roles) if roles is not None else None,
        ranks=engine.parse_ranks(ranks) if ranks is not None else None,
        where=engine.parse_where(where or []),
        window=engine.parse_window(window) if window is not None else None,
        min_dur=engine.parse_duration(min_dur) if min_dur is not None else 0,
        keep_zero_counters=keep_zero_counters,
    )


def placement(sync: list[str] | None, offset: list[str] | None, offsets_file: Path | None, no_align: bool) -> Any:
    """How files are placed, from --sync, --offset, --offsets and --no-align (an AlignOptions)."""
    rules = engine.load_offsets(offsets_file) if offsets_file is not None else ()
    rules += tuple(engine.parse_offset(text) for text in offset or ())
    return engine.AlignOptions(enabled=not no_align, offsets=rules, sync=tuple(sync or ()))


def output_format(format: str | None) -> str | None:
    """``--format``: one of the writers' names (None: the output's extension says)."""
    if format is not None and format not in engine.WRITERS:
        raise ValueError(f"--format: unknown output format {format!r} (choose from {', '.join(engine.WRITERS)})")
    return format


def phase_options(phases: str | None, steps: str | None, keep_warmup: bool) -> Any:
    """The phase rules (a PhaseOptions), from --phases, --steps and --keep-warmup."""
    steps_kept = engine.parse_ranks(steps, "--steps") if steps is not None else None
    return engine.PhaseOptions(engine.resolve(phases), steps_kept, keep_warmup)


def split_kind(split_by: str | None) -> str | None:
    """``--split-by``: one of the groupings a split knows."""
    if split_by is not None:
        engine.check_kind(split_by)
    return split_by


def metrics_map(path: Path | None) -> Any:
    """``--metrics-map``: the map its TOML file gives (a MetricsMap), else none."""
    return engine.load_metrics_map(path) if path is not None else engine.NO_MAP
