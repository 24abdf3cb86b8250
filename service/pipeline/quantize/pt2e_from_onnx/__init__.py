"""An ONNX upload made a torch program for PT2E: the service's glue around the converter (onnx_torch/).

specialize.py: the upload cleaned and fixed to the job's shapes; program.py: program_from_onnx (build
the module, check it against ONNX Runtime in parity.py, torch.export it); names.py: the PT2E file keeps
the upload's names; own_weights.py: a weight shared by several Convs, one copy each and back.
"""
