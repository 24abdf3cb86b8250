"""Built-in example models, defined in code (random, seeded weights; nothing is downloaded).

The first three are the course chapter's: ``conv_relu`` (the walk-through), ``tiny_conv_net``
(TinyConvNet) and ``op_zoo_net`` (OpZooNet: one of each op the chapter's fusion table names).
``resnet18`` and ``tiny_transformer`` are the realistic sizes the benchmarks use.

torch is imported inside the factories only: the API process lists examples without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from service.errors import InvalidOptions, shown


@dataclass(frozen=True)
class ExampleInput:
    name: str
    # Dim 0 is the symbolic batch; the rest are fixed.
    shape: tuple[int | str, ...]
    dtype: str = "float32"


@dataclass(frozen=True)
class Example:
    name: str
    description: str
    inputs: tuple[ExampleInput, ...]
    factory: Callable[[], object] = field(repr=False)
    heavy: bool = False

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "inputs": [{"name": i.name, "dtype": i.dtype, "shape": list(i.shape)} for i in self.inputs],
        }


def _seeded(build):
    def factory():
        import torch

        torch.manual_seed(0)
        model = build(torch)
        # Non-trivial BatchNorm statistics, so folding Conv+BN changes the weights measurably.
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                with torch.no_grad():
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 1.5)
        return model.eval()

    return factory


def _conv_relu(torch):
    nn = torch.nn

    class ConvRelu(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3, padding=1)
            self.relu = nn.ReLU()

        def forward(self, x):
            return self.relu(self.conv(x))

    return ConvRelu()


def _tiny_conv_net(torch):
    nn = torch.nn

    class TinyConvNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(
                nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(),
                nn.MaxPool2d(2),
            )
            self.fc = nn.Linear(16 * 8 * 8, 10)

        def forward(self, x):
            return self.fc(torch.flatten(self.features(x), 1))

    return TinyConvNet()


def _op_zoo_net(torch):
    nn = torch.nn
    F = torch.nn.functional

    class OpZooNet(nn.Module):
        """One of each op in the chapter's QDQ fusion table (int8 op / Q-DQ dropped / stays float)."""

        def __init__(self):
            super().__init__()
            self.conv_bn = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
            self.conv_a = nn.Conv2d(8, 8, 3, padding=1)
            self.conv_b = nn.Conv2d(8, 8, 1)
            self.proj = nn.Parameter(torch.randn(16, 16) * 0.25)  # MatMul with a weight
            self.fc = nn.Linear(16 * 16, 10)  # Gemm

        def forward(self, x):
            y = self.conv_bn(x)                        # Conv (+BN folded) + Relu
            y = F.max_pool2d(y, 2)                     # MaxPool            [B, 8, 8, 8]
            a = self.conv_a(y)
            b = self.conv_b(y)
            y = a + b                                  # Add
            y = y * torch.sigmoid(b)                   # Sigmoid, Mul
            y = torch.cat([y, a], dim=1)               # Concat             [B, 16, 8, 8]
            y = y - y.mean(dim=(2, 3), keepdim=True)   # ReduceMean (stays float in ORT's fusion)
            t = y.reshape(y.shape[0], 16, 64)          # Reshape
            t = t.transpose(1, 2)                      # Transpose          [B, 64, 16]
            t = torch.matmul(t, self.proj)             # MatMul
            t = torch.softmax(t, dim=-1)               # Softmax
            t = F.max_pool1d(t.transpose(1, 2), 4)     # [B, 16, 16]
            return self.fc(torch.flatten(t, 1))        # Flatten, Gemm

    return OpZooNet()


def _resnet18(torch):
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU()
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            identity = x if self.down is None else self.down(x)
            y = self.relu(self.bn1(self.conv1(x)))
            y = self.bn2(self.conv2(y))
            return self.relu(y + identity)

    class ResNet18(nn.Module):
        """torchvision's resnet18 layout, defined here so no weights or torchvision are needed."""

        def __init__(self, num_classes=1000):
            super().__init__()
            self.stem = nn.Sequential(
                nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
            )
            layers, cin = [], 64
            for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
                cin = cout
            self.layers = nn.Sequential(*layers)
            self.pool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(512, num_classes)

        def forward(self, x):
            return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))

    return ResNet18()


def _tiny_transformer(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self, d=32, heads=4):
            super().__init__()
            self.heads = heads
            self.ln1 = nn.LayerNorm(d)
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, d)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            b, s, d = x.shape
            h = self.ln1(x)
            q, k, v = self.qkv(h).chunk(3, dim=-1)
            q = q.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
            k = k.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
            v = v.reshape(b, s, self.heads, d // self.heads).transpose(1, 2)
            att = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * (d // self.heads) ** -0.5, dim=-1)
            h = torch.matmul(att, v).transpose(1, 2).reshape(b, s, d)
            x = x + self.out(h)
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class TinyTransformer(nn.Module):
        def __init__(self, d=32, layers=2, classes=10):
            super().__init__()
            self.blocks = nn.Sequential(*[Block(d) for _ in range(layers)])
            self.ln = nn.LayerNorm(d)
            self.head = nn.Linear(d, classes)

        def forward(self, x):
            return self.head(self.ln(self.blocks(x)).mean(dim=1))

    return TinyTransformer()


def _yolo_style(torch):
    nn = torch.nn
    F = torch.nn.functional

    class ConvSiLU(nn.Module):
        """Conv + BN + SiLU written as x * sigmoid(x): the activation reads the Conv output twice."""

        def __init__(self, cin, cout, k=1, s=1):
            super().__init__()
            self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
            self.bn = nn.BatchNorm2d(cout)

        def forward(self, x):
            y = self.bn(self.conv(x))
            return y * torch.sigmoid(y)

    class C2f(nn.Module):
        """YOLOv8's C2f: split, a chain of bottlenecks with residual adds, concat of every branch."""

        def __init__(self, c, n=2):
            super().__init__()
            self.cv1 = ConvSiLU(c, c, 1)
            self.blocks = nn.ModuleList(nn.Sequential(ConvSiLU(c // 2, c // 2, 3), ConvSiLU(c // 2, c // 2, 3))
                                        for _ in range(n))
            self.cv2 = ConvSiLU(c // 2 * (n + 2), c, 1)

        def forward(self, x):
            a, b = self.cv1(x).chunk(2, dim=1)
            ys = [a, b]
            for m in self.blocks:
                ys.append(ys[-1] + m(ys[-1]))
            return self.cv2(torch.cat(ys, dim=1))

    class SPPF(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.cv1 = ConvSiLU(c, c // 2, 1)
            self.cv2 = ConvSiLU(c // 2 * 4, c, 1)

        def forward(self, x):
            x = self.cv1(x)
            y1 = F.max_pool2d(x, 5, 1, 2)
            y2 = F.max_pool2d(y1, 5, 1, 2)
            y3 = F.max_pool2d(y2, 5, 1, 2)
            return self.cv2(torch.cat([x, y1, y2, y3], dim=1))

    class YoloStyle(nn.Module):
        """A small YOLOv8-shaped detector: backbone of C2f blocks, SPPF, an upsampling neck with
        concats, and two detection heads. Shared activations everywhere (SiLU reads its input twice,
        residual adds, concats), which is what decides int8 vs uint8 in ORT's QDQS8ToU8Transformer."""

        def __init__(self, classes=4):
            super().__init__()
            self.stem = ConvSiLU(3, 16, 3, 2)
            self.down1 = ConvSiLU(16, 32, 3, 2)
            self.c2f1 = C2f(32)
            self.down2 = ConvSiLU(32, 64, 3, 2)
            self.c2f2 = C2f(64)
            self.sppf = SPPF(64)
            self.neck = C2f(96, n=1)
            self.reduce = ConvSiLU(96, 32, 1)
            self.head_small = nn.Conv2d(32, 4 + classes, 1)
            self.head_large = nn.Conv2d(64, 4 + classes, 1)

        def forward(self, x):
            p3 = self.c2f1(self.down1(self.stem(x)))
            p4 = self.sppf(self.c2f2(self.down2(p3)))
            up = F.interpolate(p4, scale_factor=2.0, mode="nearest")
            n3 = self.reduce(self.neck(torch.cat([up, p3], dim=1)))
            return self.head_small(n3), self.head_large(p4)

    return YoloStyle()


EXAMPLES: dict[str, Example] = {
    e.name: e
    for e in (
        Example("conv_relu", "Conv2d(3->8, 3x3) + ReLU: the chapter's walk-through.",
                (ExampleInput("x", ("batch", 3, 16, 16)),), _seeded(_conv_relu)),
        Example("tiny_conv_net", "TinyConvNet: Conv+BN+ReLU, Conv+ReLU, MaxPool, Flatten, Linear.",
                (ExampleInput("x", ("batch", 3, 16, 16)),), _seeded(_tiny_conv_net)),
        Example("op_zoo_net", "OpZooNet: Conv+BN+Relu, MaxPool, Add, Mul, Sigmoid, Concat, ReduceMean, "
                "Reshape, Transpose, MatMul, Softmax, Flatten, Gemm.",
                (ExampleInput("x", ("batch", 3, 16, 16)),), _seeded(_op_zoo_net)),
        Example("resnet18", "ResNet-18 (torchvision layout, random weights), 224x224 input.",
                (ExampleInput("x", ("batch", 3, 224, 224)),), _seeded(_resnet18), heavy=True),
        Example("tiny_transformer", "Two pre-norm transformer blocks: attention, LayerNorm, GELU, MatMul.",
                (ExampleInput("x", ("batch", 16, 32)),), _seeded(_tiny_transformer)),
        Example("yolo_style", "A small YOLOv8-shaped detector: Conv+SiLU (x*sigmoid(x)), C2f split/concat blocks, "
                "SPPF MaxPools, nearest Resize, two heads; 64x64 input.",
                (ExampleInput("x", ("batch", 3, 64, 64)),), _seeded(_yolo_style)),
    )
}


def list_examples() -> list[dict]:
    return [e.to_dict() for e in EXAMPLES.values()]


def get_example(name: str) -> Example:
    try:
        return EXAMPLES[name]
    except KeyError:
        raise InvalidOptions(
            f"unknown example {shown(name)!r}",
            hint=f"choose one of: {', '.join(EXAMPLES)} (GET /v1/examples lists them)",
        ) from None
