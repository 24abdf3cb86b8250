"""The fp32 stage: the reference file every quantized path is measured against, checked to run."""
