"""Skip torchao work that cannot change the result: the QAT conv-bn fold when no BN follows a conv.

``convert_pt2e`` always calls ``_fold_conv_bn_qat`` when the graph holds any batch norm. That
pass builds its match and replacement patterns by ``torch.export``-ing 96 small pattern graphs
(4 conv kinds x 12 variants x match and replacement), 28 s of a 46 s convert on PP-OCRv4's
detector here, and then only rewrites a BN whose input is a conv. After ``prepare_pt2e`` has
folded every conv -> BN it could (``_fuse_conv_bn_``), the BNs left in a post-training graph are standalone
ones (after an Add, a Concat, on an input: PaddlePaddle and Keras exports have them), so the
patterns find nothing and the pass only costs time.

The guard calls torchao's pass unchanged whenever some BN takes a conv's output; otherwise it
returns the graph as is. A test pins that the converted module is the same code either way
(``tests/pipeline/test_pt2e_shortcuts.py``). torchao is pinned; if the names move, the
guard is not installed and convert takes the usual path.
"""

from __future__ import annotations

import logging

log = logging.getLogger("quantcompare.pt2e_shortcuts")

_installed = False


def bn_after_conv(m) -> bool:
    """Some batch norm of ``m`` takes a conv's (or conv transpose's) output: torchao's QAT
    patterns can match only there."""
    from torchao.quantization.pt2e.utils import _is_bn_node, _is_conv_or_conv_transpose_node

    return any(_is_bn_node(n) and n.args and _is_conv_or_conv_transpose_node(n.args[0]) for n in m.graph.nodes)


def install_conv_bn_fold_guard() -> bool:
    """Wrap ``quantize_pt2e._fold_conv_bn_qat`` once per process. True when the guard is on."""
    global _installed
    if _installed:
        return True
    try:
        from torchao.quantization.pt2e import quantize_pt2e
        from torchao.quantization.pt2e.utils import _is_bn_node, _is_conv_or_conv_transpose_node  # noqa: F401

        original = quantize_pt2e._fold_conv_bn_qat
    except (ImportError, AttributeError) as e:
        log.info("conv-bn fold guard not installed: %s", e)
        return False

    def fold_conv_bn_qat_when_a_conv_feeds_a_bn(m):
        return original(m) if bn_after_conv(m) else m

    fold_conv_bn_qat_when_a_conv_feeds_a_bn.original = original  # type: ignore[attr-defined]
    quantize_pt2e._fold_conv_bn_qat = fold_conv_bn_qat_when_a_conv_feeds_a_bn
    _installed = True
    return True
