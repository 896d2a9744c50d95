"""Run configuration: the YAML schema (pydantic v2), loading, CLI overrides and the config hash."""

from __future__ import annotations

import hashlib
import json
import math
import os
from importlib import resources
from pathlib import Path
from typing import Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ert.config.errors import first_error, quoted
from ert.errors import ErtError
from ert.spec import NOISE_THRESHOLD, SLOW_HOST_THRESHOLD

PRECISIONS = ("fp64", "fp32", "fp16", "int32", "int64")

# Bounds that keep a config from hanging the planner or validating a run that cannot finish.
MIN_GROWTH = 1.01  # 1.0000001 would plan about 10^8 working sets
MAX_PLANNED_POINTS = 200_000  # kernel variants x working sets x thread counts; the default plans a few hundred
MAX_THREADS = 65536  # threads per rank
MAX_COUNT = 1 << 31  # threads, sizes and geometries: no machine has more


class _Strict(BaseModel):
    # allow_inf_nan: `.inf` / `.nan` would validate, then fail at the header write (JSON has neither).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def host_memory_bytes() -> int | None:
    """Physical memory of this host, bytes (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _within_memory(key: str, value: int) -> int:
    memory = host_memory_bytes()
    if memory and value > memory:
        shown = f"{value} bytes" if value.bit_length() <= 256 else quoted(value)
        raise ValueError(f"{key} ({shown}) exceeds this host's memory ({memory} bytes, "
                         f"{memory / 2**30:.1f} GiB): the run could not allocate it")
    return value


class WorkingSet(_Strict):
    """Working-set sizes swept geometrically; bytes of the one array, summed over all threads and ranks."""

    min_bytes: int = Field(16 * 1024, gt=0, description="smallest working set, bytes")
    max_bytes: int = Field(1 << 30, gt=0, description="largest working set, bytes")
    growth: float = Field(1.25, ge=MIN_GROWTH, le=4.0, description="factor between consecutive working sets")
    compute_max_bytes: Optional[int] = Field(
        None, gt=0, description="largest working set for kernels of more than 2 FLOPs per element "
                                "(their peak is cache-resident); null sweeps them to max_bytes")

    @field_validator("max_bytes", "compute_max_bytes")
    @classmethod
    def _fits_memory(cls, value: int | None, info) -> int | None:
        return value if value is None else _within_memory(info.field_name, value)

    @model_validator(mode="after")
    def _ordered(self):
        if self.max_bytes < self.min_bytes:
            raise ValueError(f"max_bytes ({self.max_bytes}) is smaller than min_bytes ({self.min_bytes})")
        return self

    def count(self) -> int:
        """How many working sets the grid has at most (before rounding to granules merges some)."""
        return int(math.log(self.max_bytes / self.min_bytes) / math.log(self.growth)) + 2


class Timing(_Strict):
    """How long each point is timed and how noise is handled."""

    min_seconds: float = Field(0.01, gt=0, le=60, description="the timed region of one repeat lasts at least this")
    repeats: int = Field(5, ge=1, le=1000, description="timed repeats per point; min, median and max are kept")
    noise_threshold: float = Field(NOISE_THRESHOLD, gt=0, description="(max-min)/min of a point's repeats above which it is noisy")
    max_remeasure: int = Field(2, ge=0, le=20, description="times a noisy point is measured again before it is flagged")
    # Timing budget: a point whose first min_repeats regions already agree
    # within noise_threshold / 2 needs no more; a noisy one gets up to
    # `repeats` regions, then longer regions, all within max_point_seconds.
    min_repeats: Optional[int] = Field(
        None, ge=1, le=1000, description="timed repeats a quiet point stops at; null: always `repeats`")
    max_point_seconds: Optional[float] = Field(
        None, gt=0, description="cap on the timed seconds of one point, re-measures included; null: no cap")

    @model_validator(mode="after")
    def _repeats_ordered(self):
        if self.min_repeats is not None and self.min_repeats > self.repeats:
            raise ValueError(f"min_repeats ({self.min_repeats}) exceeds repeats ({self.repeats})")
        return self


class OpenCLOptions(_Strict):
    """Options of the opencl backend (ignored by the others)."""

    platform: Optional[Union[int, str]] = Field(None, description="platform index, or a substring of its name")
    device: Optional[Union[int, str]] = Field(
        None, description="device index among the matching devices, or a substring of its name; "
                          "null: the rank's index within its node picks among them")
    device_type: Literal["all", "cpu", "gpu", "accelerator"] = "all"
    global_sizes: Optional[list[int]] = Field(
        None, description="work-items per launch to try (ERT_OCL_SIZES); null: chosen from the compute units")
    local_sizes: Optional[list[int]] = Field(None, description="work-group sizes to try; null: chosen by the device")
    vector_width: Optional[Literal[1, 2, 4, 8, 16]] = Field(
        None, description="elements per OpenCL vector in the kernel; null: the device's native width")
    chains: Optional[int] = Field(
        None, ge=1, le=16, description="independent vectors per work-item (multiply-add chains, partial sums); "
                                       "null: 6 on CPU devices, 16 on CPU devices with 512-bit native "
                                       "vectors, 4 elsewhere")
    layout: Literal["auto", "contiguous", "interleaved"] = Field(
        "auto", description="contiguous: one block per work-item (CPUs); interleaved: neighbouring work-items "
                            "touch neighbouring vectors (GPUs); auto: by device type")
    cpu_reference: bool = Field(
        True, description="on a CPU device, time numba-cpu's FP64 FMA peak (~2 s) for the warning beside the "
                          "OpenCL numbers")

    @field_validator("global_sizes", "local_sizes")
    @classmethod
    def _positive_sizes(cls, values):
        if values is not None and (not values or any(isinstance(v, bool) or not 1 <= v <= MAX_COUNT
                                                         for v in values)):
            raise ValueError("must be a non-empty list of positive integers below 2^31")
        return values


class CudaOptions(_Strict):
    """Options of the cuda backend (ignored by the others)."""

    device: Optional[int] = Field(None, ge=0, le=MAX_COUNT, description="GPU index; null: the rank's index within its node")
    blocks: Optional[list[int]] = Field(
        None, min_length=1, description="grid sizes to try; null: one full wave per block size (SMs x "
                                        "blocks per SM; ERT's set on a V100)")
    threads_per_block: Optional[list[int]] = Field(
        None, min_length=1, description="block sizes to try; null: [64, 128, 256, 512, 1024]")
    blocks_threads: Optional[list[int]] = Field(
        None, min_length=1, description="only pairs whose blocks x threads_per_block is one of these "
                                        "(ERT_BLOCKS_THREADS); null: SMs x threads per SM when blocks and "
                                        "threads_per_block are defaults, else every pair")

    @field_validator("blocks_threads", mode="before")
    @classmethod
    def _one_or_list(cls, value):
        # ERT configs give one product (`ERT_BLOCKS_THREADS 163840`).
        return [value] if isinstance(value, int) and not isinstance(value, bool) else value

    @field_validator("blocks", "threads_per_block", "blocks_threads")
    @classmethod
    def _positive(cls, values):
        if values is not None and any(not 1 <= v <= MAX_COUNT for v in values):
            raise ValueError("values must be positive and below 2^31")
        if values is not None and len(set(values)) != len(values):
            raise ValueError("values repeat")
        return values

    @field_validator("threads_per_block")
    @classmethod
    def _block_limit(cls, values):
        if values is not None and max(values) > 1024:
            raise ValueError("CUDA blocks hold at most 1024 threads")
        return values


LEVEL_GROUPS = ("memory", "links", "network")


class TransferOptions(_Strict):
    """Transfer-size sweep of the link, peer and network levels (`levels: [links, network]`)."""

    min_bytes: int = Field(8, gt=0, description="smallest transfer (message), bytes: its time is the latency")
    max_bytes: int = Field(256 * 1024 * 1024, gt=0, description="largest host<->device (and peer) copy, bytes")
    network_max_bytes: int = Field(4 * 1024 * 1024, gt=0, description="largest MPI message, bytes")
    growth: float = Field(4.0, ge=MIN_GROWTH, le=64.0, description="factor between consecutive sizes")
    min_seconds: float = Field(0.002, gt=0, le=10, description="each timed sample lasts at least this")
    samples: int = Field(3, ge=1, le=100, description="timed samples per size (min, median and max are kept)")

    @field_validator("max_bytes", "network_max_bytes")
    @classmethod
    def _fits_memory(cls, value: int, info) -> int:
        return _within_memory(info.field_name, value)

    @model_validator(mode="after")
    def _ordered(self):
        for key in ("max_bytes", "network_max_bytes"):
            if getattr(self, key) < self.min_bytes:
                raise ValueError(f"{key} ({getattr(self, key)}) is smaller than min_bytes ({self.min_bytes})")
        return self

    def sizes(self, max_bytes: int) -> list[int]:
        """min_bytes, then x growth (rounded) up to and including max_bytes."""
        out, size = [], float(self.min_bytes)
        while round(size) <= max_bytes:
            if not out or round(size) != out[-1]:
                out.append(int(round(size)))
            size *= self.growth
        if out[-1] != max_bytes:
            out.append(max_bytes)
        return out


class RatedOptions(_Strict):
    """Rated values the machine cannot report itself (ert.hardware.dram)."""

    dram_gbytes_per_s: Optional[float] = Field(
        None, gt=0, le=100000, description="the host's DRAM bandwidth, GB/s (channels x MT/s x 8 B); it takes "
                                           "precedence over what SMBIOS shows")


class WeatherOptions(_Strict):
    """The host's weather during the sweep (ert.measure.weather): sentinel readings, suspect points measured again."""

    enabled: bool = Field(True, description="read a sentinel kernel per cache level between points")
    every_seconds: float = Field(0.75, gt=0, le=3600, description="a reading at most this often (sweep seconds)")
    budget: float = Field(0.10, gt=0, le=0.5, description="share of the sweep's time the readings may take")
    remeasure_budget: float = Field(
        0.25, ge=0, le=0.5, description="share of the sweep's time measuring suspect points again may take")


class RunConfig(_Strict):
    """One sweep: the cartesian product of working sets, FLOPs per element, precisions, FMA and access."""

    backend: str = Field("auto", description="backend name (see `ert backends`), or auto for the best available")
    # Empty only in a tensor-only run (tensor given): no vector points at all (configs/gpu-tensor-first.yaml).
    precisions: list[Literal["fp64", "fp32", "fp16", "int32", "int64"]] = Field(default_factory=lambda: ["fp64", "fp32"])
    flops_per_element: list[int] = Field(default_factory=lambda: [1, 2, 8, 32, 128], min_length=1)
    fma: Literal["on", "off", "both"] = "both"
    access: list[Literal["rw", "ro"]] = Field(default_factory=lambda: ["rw"], min_length=1)
    working_set: WorkingSet = Field(default_factory=WorkingSet)
    timing: Timing = Field(default_factory=Timing)
    weather: WeatherOptions = Field(default_factory=WeatherOptions)
    threads: Union[Literal["auto"], int] = Field("auto", description="threads per rank, or auto for the cores this process may use")
    output_dir: str = Field("results", description="where timestamped run directories are created")
    sweep: Literal["dense", "adaptive"] = Field(
        "dense", description="dense: every working set of the grid; adaptive: a coarse pass refined near "
                             "level transitions, and a compute-peak search at one cache-resident working set")
    thread_counts: Optional[list[int]] = Field(
        None, description="thread scaling: sweep once per thread count (ascending; the last is `threads`)")
    sustain_seconds: Optional[float] = Field(
        None, gt=0, le=86400, description="after the sweep, hold the FP64 peak and DRAM points this long each")
    int_ops: list[Literal["madd", "add"]] = Field(
        default_factory=lambda: ["madd"], min_length=1,
        description="integer compute kernels (int32/int64): madd (multiply-add, 2 ops) and/or add "
                    "(dependent adds in registers, 1 op each)")
    mixes: list[Literal["fma+add", "int+float"]] = Field(
        default_factory=list, description="measured mixes: fma+add (FMAs beside independent FP adds, "
                                          "1:1) per FP precision; int+float (int32 madd beside fp32 FMA, int64 "
                                          "beside fp64) per FP precision")
    levels: list[Literal["memory", "links", "network"]] = Field(
        default_factory=lambda: list(LEVEL_GROUPS), min_length=1,
        description="what to measure: memory (the sweep: caches, DRAM, compute peaks), links (host<->device "
                    "copies and peer GPUs, device backends only), network (MPI, more than one rank only)")
    transfer: TransferOptions = Field(default_factory=TransferOptions)
    tensor: list[Literal["fp16", "bf16", "tf32", "fp64", "fp8", "int8"]] = Field(
        default_factory=list, description="tensor-core roofs (cuda backend, sm_80+; fp8 only where native: sm_89, "
                                          "sm_12x mma.sync, sm_90 wgmma): warp-level mma.sync, and Hopper's wgmma on "
                                          "sm_90, of these input types (fp16/bf16/tf32/fp8 accumulate in FP32, fp64 in "
                                          "FP64, int8 in s32 with its rate in GIOP/s)")
    opencl: OpenCLOptions = Field(default_factory=OpenCLOptions)
    cuda: CudaOptions = Field(default_factory=CudaOptions)

    def backend_options(self, name: str | None = None):
        """The config's block for backend ``name`` (default: this config's backend): what it is created with."""
        return {"opencl": self.opencl, "cuda": self.cuda}.get(name or self.backend)
    rated: Optional[RatedOptions] = Field(None, description="rated values given by the user: dram_gbytes_per_s")
    slow_host_threshold: float = Field(
        SLOW_HOST_THRESHOLD, gt=0, lt=1, description="runs on 2+ hosts: a host more than this share below the median of the "
                                      "hosts on any ceiling is named in a slow-host warning")

    @field_validator("flops_per_element")
    @classmethod
    def _powers_of_two(cls, values: list[int]) -> list[int]:
        for v in values:
            if v < 1 or v > 1024 or v & (v - 1):
                raise ValueError(f"{v} is not a power of two from 1 to 1024")
        if len(set(values)) != len(values):
            raise ValueError("values repeat")
        return sorted(values)

    @field_validator("precisions", "access", "int_ops", "mixes", "levels", "tensor")
    @classmethod
    def _unique(cls, values: list[str]) -> list[str]:
        if len(set(values)) != len(values):
            raise ValueError("values repeat")
        return values

    @field_validator("fma", mode="before")
    @classmethod
    def _yaml_on_off(cls, value):
        # YAML 1.1 reads a bare `on` / `off` (the documented spelling) as a boolean.
        if isinstance(value, bool):
            return "on" if value else "off"
        return value

    @field_validator("threads", mode="before")
    @classmethod
    def _threads_not_bool(cls, value):
        # A bool is an int to pydantic: `threads: yes` would silently mean 1 thread.
        if isinstance(value, bool):
            raise ValueError("must be a positive integer or 'auto'")
        return value

    @field_validator("threads")
    @classmethod
    def _threads(cls, value):
        if isinstance(value, int) and not 1 <= value <= MAX_THREADS:
            raise ValueError(f"must be 'auto' or a positive integer up to {MAX_THREADS}")
        return value

    @field_validator("thread_counts")
    @classmethod
    def _thread_counts(cls, values):
        if values is None:
            return values
        if not values or any(isinstance(v, bool) or not 1 <= v <= MAX_THREADS for v in values):
            raise ValueError(f"must be a list of positive integers up to {MAX_THREADS}")
        if len(set(values)) != len(values):
            raise ValueError("values repeat")
        return sorted(values)

    @model_validator(mode="after")
    def _threads_match_counts(self):
        # The top-level ceilings are those of the largest count, so it is `threads`.
        if self.thread_counts and self.threads != "auto" and self.threads != self.thread_counts[-1]:
            raise ValueError(f"threads ({self.threads}) must be the largest of thread_counts "
                             f"({self.thread_counts[-1]})")
        return self

    @model_validator(mode="after")
    def _integer_kernels(self):
        # int32/int64 run the read+write add and multiply-add kernels, unfused (numba-cpu).
        ints = [p for p in self.precisions if p in ("int32", "int64")]
        if ints and self.fma == "on":
            raise ValueError(f"fma: on asks for fused multiply-adds, which {ints[0]} has none of "
                             f"(its multiply-add is a multiply and an add): use fma: off or both")
        if ints and self.access == ["ro"]:
            raise ValueError(f"{ints[0]} has no load-only kernel: add rw to access")
        return self

    @model_validator(mode="after")
    def _mixes_need(self):
        if self.mixes:
            if not [p for p in self.precisions if p in ("fp64", "fp32")]:
                raise ValueError(f"mixes ({', '.join(self.mixes)}) run beside fp64 or fp32: add one to precisions")
            if self.fma == "off":
                raise ValueError("mixes interleave FMAs: they need fma: on or both")
            if "rw" not in self.access:
                raise ValueError("mixes are read+write kernels: add rw to access")
            if not [f for f in self.flops_per_element if f >= 2]:
                raise ValueError("mixes need a flops_per_element of 2 or more")
        return self

    @model_validator(mode="after")
    def _precisions_or_tensor_only(self):
        if not self.precisions and not self.tensor:
            raise ValueError("precisions: List should have at least 1 item (empty only in a tensor-only run, "
                             "which names its tensor types)")
        return self

    @model_validator(mode="after")
    def _tensor_backend(self):
        if self.tensor and self.backend not in ("auto", "cuda"):
            raise ValueError(f"tensor roofs are measured by the cuda backend only, not {self.backend} "
                             f"(remove tensor, or use backend: cuda)")
        return self

    @model_validator(mode="after")
    def _points_bounded(self):
        # An upper bound of the plan from the config alone (kernel variants x working sets x thread counts),
        # so that `ert validate` and `ert-run` refuse a grid that would take days before planning it.
        variants = len(self.precisions) * len(self.access) * len(self.flops_per_element) * len(self.fma_modes())
        variants += len(self.mixes) * len(self.precisions)
        planned = variants * self.working_set.count() * len(self.thread_counts or [1])
        if planned > MAX_PLANNED_POINTS:
            raise ValueError(f"plans up to {planned} points (more than {MAX_PLANNED_POINTS}): raise "
                             f"working_set.growth, narrow min_bytes..max_bytes, or measure fewer kernels")
        return self

    def fma_modes(self) -> list[bool]:
        return {"on": [True], "off": [False], "both": [True, False]}[self.fma]

    def to_dict(self) -> dict:
        data = self.model_dump(mode="json")
        if data.get("rated") is None:
            data.pop("rated", None)  # absent, as before the key existed: the hash of older configs is unchanged
        return data

    def sha256(self) -> str:
        """Hash of the resolved config, independent of key order and formatting."""
        canonical = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def from_dict(data: object, *, source: object = "<config>") -> RunConfig:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ErtError(f"the top level must be a mapping of keys, not {type(data).__name__}", path=source)
    try:
        return RunConfig.model_validate(data)
    except (OverflowError, RecursionError) as exc:  # pydantic converting 1e400 to an int, say
        raise ErtError(f"a value is out of range ({type(exc).__name__})", path=source) from None
    except ValidationError as exc:
        key, msg = first_error(exc, top_keys=RunConfig.model_fields)
        raise ErtError(msg, path=source, key=key or None) from None


def load(path: str | Path) -> RunConfig:
    """Read and validate a YAML config; every fault is an ErtError naming the file and key."""
    import yaml

    from ert.config import yamlsafe

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")  # the file's encoding, not the locale's
    except FileNotFoundError:
        raise ErtError("no such file", path=path) from None
    except IsADirectoryError:
        raise ErtError("is a directory, not a config file", path=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ErtError(f"cannot read: {getattr(exc, 'strerror', None) or exc}", path=path) from None
    try:
        data = yamlsafe.load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else None
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ErtError(f"invalid YAML: {problem}", path=path, key=where) from None
    if data is None:
        # An empty file (or one of comments only) is almost always a mistake: taking
        # it as the built-in defaults would start a long dense sweep nobody asked for.
        raise ErtError("the config is empty (no keys, only blank lines or comments); "
                       "give at least one key, or run without a config for the packaged default", path=path)
    return from_dict(data, source=path)


def default_path() -> Path:
    """The default.yaml shipped inside the package (what a bare `ert-run` uses)."""
    return Path(str(resources.files("ert.configs").joinpath("default.yaml")))


def with_overrides(config: RunConfig, **overrides) -> RunConfig:
    """A copy with CLI overrides applied (None values are ignored), validated again."""
    data = config.to_dict()
    data.update({k: v for k, v in overrides.items() if v is not None})
    return from_dict(data, source="command line")
