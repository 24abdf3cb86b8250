"""Targets of options.platforms beside arm64: ort:<version>, qnn[:<soc_model>], openvino:cpu (issue 49)."""
