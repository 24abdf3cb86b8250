"""The report's ``layers`` section: per-tensor error of every quantized file against fp32.

Filled by ``service.pipeline.layers.layers``. One row per float activation of the fp32 model
(graph inputs and every compute node's outputs, main graph only), measured at ``disable_all``
(the file as written) on the evaluation samples.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class LayerCell(_Model):
    """One fp32 tensor in one quantized file, against the fp32 model's value of it."""

    sqnr_db: float | None  # None: identical to fp32 (infinite SQNR)
    # 95% interval of sqnr_db, a percentile bootstrap over the samples (LayersReport.sampling says how):
    # [low, high]; high None when some resample holds no error at all. None with fewer than 2 samples,
    # for an exact tensor, a zero reference or non-finite values.
    sqnr_db_ci: list[float | None] | None = None
    cosine: float
    max_abs_error: float  # over the positions where both are finite
    # values that are inf or NaN in the file where fp32 has a number (or another non-finite value);
    # when nonzero, sqnr_db is the floor (-200) and cosine 0
    nonfinite: int = 0
    # fp32's value is 0 at every position and the file's is not: sqnr_db is the floor (-200) by
    # convention, and the tensor is left out of ``worst``, ``origins`` and its readers' drops.
    zero_reference: bool = False
    # max_abs_error / scale: how many quantization steps the worst element is off.
    max_abs_error_lsb: float | None = None
    # Share of the fp32 values beyond [scale*(qmin-zp), scale*(qmax-zp)] by more than half a
    # step: they saturate at the end of the range instead of rounding to the nearest step.
    clipped_share: float | None = None
    scale: float | None = None  # None: the file keeps this value in float
    zero_point: int | None = None
    file_tensor: str  # the tensor of the file that was read (dequantized when integer)
    alignment: str  # how file_tensor was found (structure / absorbed op / name), in words
    # SQNR of this tensor's worst input minus its own: how much error appears at this op.
    drop_db: float | None = None
    # SQNR at the other levels where the tensor still exists in the graph ORT runs (options.layers.by_level).
    by_level: dict[str, float | None] | None = None


class LayerRow(_Model):
    tensor: str  # the fp32 model's tensor name
    op_type: str  # its producer in the fp32 model ("input" for a graph input)
    node: str = ""  # its producer's name in the fp32 model
    depth: int  # longest path from a graph input, in compute nodes
    artifacts: dict[str, LayerCell] = Field(default_factory=dict)
    left_out: dict[str, str] = Field(default_factory=dict)  # artifact -> why it has no figure here
    # Where the tools disagree on this tensor by 3 dB or more, what their steps say about why.
    explanation: str | None = None


class LayerOrigin(_Model):
    """A tensor where error appears, as opposed to one that only inherits it."""

    artifact: str
    tensor: str
    node: str
    op_type: str
    sqnr_db: float | None
    inherited_sqnr_db: float | None  # the worst SQNR among its inputs (None: they are exact)
    drop_db: float
    summary: str  # "SQNR falls 12.1 dB at conv2d_1 (Conv): 41.3 -> 29.2 dB"


class RetryArtifact(_Model):
    """One quantizer re-run with the worst origin nodes kept in float."""

    artifact: str
    excluded_nodes: list[str]  # fp32 node names passed to the tool's filter
    how: str  # "nodes_to_exclude" / "XNNPACKQuantizer.set_module_name(..., None)"
    sqnr_db_before: float | None = None  # worst output SQNR at disable_all
    sqnr_db_after: float | None = None
    latency_ms_before: float | None = None  # median at level "all", same threads
    latency_ms_after: float | None = None
    error: str | None = None


class LayersRetry(_Model):
    k: int
    seconds: float
    artifacts: list[RetryArtifact] = Field(default_factory=list)
    skipped: list[str] = Field(default_factory=list)  # what did not run, and why (budget, no node)


class LayersSampling(_Model):
    """How many samples the table ran, and why no more: the sample count adapts until the ranking is
    settled or every ``sqnr_db_ci`` is at most ``target_width_db`` wide, within the extras' budget and
    options.layers' samples and seconds."""

    interval: str  # how sqnr_db_ci is computed, in one sentence
    target_width_db: float
    widest_db: float | None = None  # the widest bounded interval (None: none); an unbounded one counts in over_target
    over_target: int = 0  # cells whose interval is wider than target_width_db (or has no upper bound)
    stopped: str  # why no more samples were run
    # Whether the table's answer (which tensors lose the most) is settled: in every file the worst 1-5
    # tensors' intervals lie apart from the rest's (None: no intervals); ``ranking`` says so in words,
    # with the widest interval.
    settled: bool | None = None
    ranking: str = ""
    # The first samples whose runs were also the accuracy runs at disable_all (run once for both: the same
    # files, kernels and feeds, with the tensors exposed); 0: none shared.
    reused_samples: int = 0


class WorstTensor(_Model):
    """An artifact's tensor with the lowest SQNR, and whether the measurement settles that ranking."""

    tensor: str
    sqnr_db: float | None
    sqnr_db_ci: list[float | None] | None = None
    # None: no interval to judge by; False: other tensors' intervals overlap this one's, so with other
    # samples one of them may be the worst.
    settled: bool | None = None
    overlapping: list[str] = Field(default_factory=list)  # those tensors, lowest SQNR first (at most 10)
    summary: str  # "12.4 dB (95% interval 11.6 to 13.1 dB); ranking not settled: the intervals of ... overlap it"


class LayersReport(_Model):
    level: str = "disable_all"
    samples: int  # evaluation samples every figure of the table is summed over
    method: str  # how the figures were measured, in one sentence
    rows: list[LayerRow] = Field(default_factory=list)
    worst: dict[str, str] = Field(default_factory=dict)  # artifact -> tensor with the lowest SQNR
    worst_detail: dict[str, WorstTensor] = Field(default_factory=dict)  # the same, with its interval
    sampling: LayersSampling | None = None
    origins: list[LayerOrigin] = Field(default_factory=list)
    # Share of rows with a figure for every quantized artifact that ran.
    aligned_all_share: float = 0.0
    truncated: bool = False  # more float tensors than options.layers.max_tensors
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    retry: LayersRetry | None = None
