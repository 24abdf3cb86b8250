"""Every lint code the report can carry: its severities and what it says, in one line.

A code is a contract: CI jobs filter on it. The suite checks that every code the code base writes is
listed here with the severities it writes, and that docs/lints.md lists exactly these codes;
``checked_lints`` (the decide stage's last step) logs any lint that slipped past both.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from service.schemas.levels import Lint

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LintKind:
    severities: tuple[str, ...]  # the first is the usual one; others depend on what was found
    summary: str


# code | severities (the first is the usual one) | what it says, in one line
_TABLE = """
# what the uploaded fp32 model is
generated_samples | warning | calibration and evaluation ran on generated samples, not the user's data: accuracy figures say how the file behaves on those
random_ops | warning | the fp32 model draws random numbers; every session is seeded, and outputs fed by the draws are reported as not measured
fed_back_selection | warning | a Loop feeds the index its ArgMax/TopK picks back into its next step: one flipped pick changes everything after it
overridable_initializers | warning | initializers also listed as graph inputs: a caller may override them, and quantizers treat them as constants
upload_weights_already_integer | warning | the upload stores weights as integers that a Cast turns into float
ort_optimized_upload | warning | the upload holds ops ORT's graph optimizer writes: it was saved after ORT's own rewrites
symbolic_dims_measured_at_one_size | info,warning | symbolic input dims were measured at one size; the figures hold for that size
fp32_output_unstable_across_levels | info,warning | the fp32 reference itself differs between ORT levels: SQNR above that noise means nothing
fp32_output_nonfinite | warning | the fp32 reference outputs NaN or inf on these samples
fp32_output_saturated | warning | an fp32 output is saturated on these samples: SQNR on it says little
padded_selection_outputs | info | outputs computed from what a selection chose, in a fixed shape (a padded detection list)
selection_inputs | info | what the model's selections (NMS, TopK) read, per file, with its per-tensor error
# what a tool wrote into its file
nothing_quantized | warning | a tool wrote no quantized op into its file, with why
weights_only | error | the file dequantizes integer weights but quantizes no activation
per_channel_below_opset_13 | error | per-channel quantization written below opset 13, where DequantizeLinear has no axis
asymmetric_per_channel_conv_weights | error | per-channel Conv weights with different zero points per channel
pt2e_scale_floor | error,warning | torchao's smallest scale (eps=2**-12) is coarser than some tensors' ranges (rounded to zero where 'error')
pt2e_ignores_inputs | warning | the PT2E file computes as if an input held the one value it held in every calibration sample
sentinel_in_activation_range | error | activations calibrated to a huge int8 step: a sentinel value (a -1e9 mask) widened their range
repeated_weights | warning | the same weight is stored more than once in a file
qoperator_dropped_activation | error | ORT's QOperator quantizer removed a Relu/Clip whose input another node reads
no_quantized_artifact | error | no path produced a quantized file
# what ORT makes of the files
qoperator_int8_activations_x86 | warning | the QOperator file's int8 activations run ORT's slow s8s8 kernels on x86
u8s8_saturation_without_vnni | warning | u8s8 kernels on a CPU without VNNI can saturate
no_int8_kernels | warning | ORT runs no int8 kernel for this file at any level
level_failed | error | ORT could not run a file at some level
# where the files will run (options.platforms: qnn, openvino:cpu, ort:<version>)
target_compile_failed | error | a target (QNN, OpenVINO, another ORT release) refuses a file, with its own error and a hint
target_silent_fallback | error | a target ran a file on ORT's CPU EP without a word (a backend that did not load, dynamic dims)
target_nodes_left | info | a target leaves nodes of a file to ORT's CPU EP, with the target's reasons
target_fuses_differently | warning | another ORT release writes a different graph for a file than this machine's ORT
target_level_missing | info | an ORT release has no such optimization level (layout came in 1.23): not run there
# what the outputs show
data_dependent_outputs | warning,info | outputs whose shape follows the values are compared by shape only
nonfinite_outputs | error | a quantized file outputs NaN or inf where fp32 does not
collapsed_output | warning | a quantized output is one value everywhere while fp32's varies
integer_outputs_differ | warning | integer outputs (ids, counts) differ from fp32's
circular_outputs | info | outputs that hold angles are judged by their angular error, not SQNR (a wrap is no error of 2 pi)
saturated_outputs | info | saturated classifier outputs are judged by argmax agreement, not SQNR
unmeasured_outputs | warning | outputs with no accuracy figure (the same on every sample, or drawn from unseeded random ops)
"""
LINT_CATALOG: dict[str, LintKind] = {
    code: LintKind(tuple(severities.split(",")), summary)
    for code, severities, summary in (
        (part.strip() for part in row.split("|", 2)) for row in _TABLE.strip().splitlines() if not row.startswith("#"))
}


def checked_lints(lints: list[Lint]) -> list[Lint]:
    """``lints`` as they go into the report; one not in the catalog as written is logged, never dropped
    (a report is worth more with an undocumented lint than without its finding)."""
    for lint in lints:
        kind = LINT_CATALOG.get(lint.code)
        if kind is None or lint.severity not in kind.severities:
            log.error("lint %r (%s) is not in service/pipeline/verdict/lint_catalog.py as such", lint.code,
                      lint.severity)
    return lints
