"""Saying loudly when the numbers describe generated data, not the user's.

Without an uploaded ``.npz``, calibration and evaluation run on generated samples. The activation
scales ORT and PT2E compute, and every SQNR/cosine in the report, then describe that data. The
lint says so (with each input's generator); the page and the CLI show a banner from the same text;
the ``calibration_data_uploaded`` gate lets CI refuse such a report.
"""

from __future__ import annotations

from service.schemas.levels import Lint
from service.schemas.report import SamplesInfo

CODE = "generated_samples"


def made_up_data_banner(samples: SamplesInfo) -> str | None:
    """One line for the top of the page and of the CLI summary, or None when the data was uploaded."""
    if samples.source != "generated":
        return None
    blind = [k for k, v in samples.generators.items() if v.startswith("normal(0, 1)")]
    what = (f"generated normal(0, 1) samples for {', '.join(blind)}" if blind else "generated samples")
    return (f"MADE-UP DATA: no calibration .npz was uploaded; scales and accuracy below describe {what}, "
            "not your model's real inputs")


def made_up_data_lints(samples: SamplesInfo) -> list[Lint]:
    if samples.source != "generated":
        return []
    per_input = "; ".join(f"{k}: {v}" for k, v in samples.generators.items())
    blind = any(v.startswith("normal(0, 1)") for v in samples.generators.values())
    return [Lint(
        code=CODE, severity="warning",
        message=("calibration and evaluation used generated samples, not uploaded data (" + per_input + "). "
                 "The activation ranges every quantizer calibrated, and every accuracy figure in this report, "
                 "describe that data" + (": for images in [0, 1], normalized inputs, audio or embeddings, "
                                         "normal(0, 1) is not what the model sees in use" if blind else "") + "."),
        hint=("upload representative inputs as an .npz (one array per input name, samples on the leading axis); "
              "in CI add the gate 'calibration_data_uploaded' so a pipeline cannot pass on generated data"),
    )]
