"""CNN architectures as small torch.nn.Module definitions (needs torch).

The model zoo of ``python -m rlx_cpu run --zoo`` and of the model tests
(tests/test_models.py).  torchvision cannot be a dependency, so the
architectures are written here following torchvision's layer configurations
(block structure, expansion ratios, where activations, SE and shortcuts sit);
the zoo entries (``MODELS`` at the end) use reduced width and depth so that
exporting and running one takes well under a second at small resolutions.
Weights are random (seeded by the caller), nothing is downloaded.  BatchNorm
layers get random running statistics (:func:`randomize_batch_norms`) so the
folded (or imported) normalisation is not an identity.

This module imports torch at its top: import it only where torch is wanted
(``rlx_cpu.zoo`` does so lazily; ``import rlx_cpu`` never does).
"""
import torch
from torch import nn
from torch.nn import functional as F


def randomize_batch_norms(model, generator):
    """Give every BatchNorm non-trivial running statistics and affine params."""
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=generator) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=generator) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(c, generator=generator) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(c, generator=generator) * 0.1)
    return model


def make_divisible(v, divisor):
    """torchvision's _make_divisible: v rounded to the nearest multiple of
    divisor (at least divisor), never more than 10% below v."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def conv_bn(cin, cout, k=3, stride=1, groups=1, act=nn.ReLU):
    layers = [nn.Conv2d(cin, cout, k, stride, (k - 1) // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]
    if act is not None:
        layers.append(act(inplace=True) if act in (nn.ReLU, nn.ReLU6, nn.Hardswish) else act())
    return nn.Sequential(*layers)


# ---------------------------------------------------------------------------
# ResNet (He et al. 2016; torchvision.models.resnet)
# ---------------------------------------------------------------------------

class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or cin != planes:
            self.downsample = nn.Sequential(nn.Conv2d(cin, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1, groups=1, base_width=64):
        super().__init__()
        width = int(planes * (base_width / 64.0)) * groups
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, groups=groups, bias=False)   # stride on the 3x3 (v1.5)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or cin != out:
            self.downsample = nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + idt)


class ResNet(nn.Module):
    """torchvision's ResNet: 7x7/2 stem, 3x3/2 max pool, four stages (the first
    at stride 1, the others 2), global average pool, fully connected."""

    def __init__(self, block, layers, width=8, num_classes=10, **block_kw):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = width
        stages = []
        for i, n in enumerate(layers):
            planes = width * 2 ** i
            blocks = []
            for j in range(n):
                blocks.append(block(cin, planes, 2 if (j == 0 and i > 0) else 1, **block_kw))
                cin = planes * block.expansion
            stages.append(nn.Sequential(*blocks))
        self.layers = nn.Sequential(*stages)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layers(x)
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ---------------------------------------------------------------------------
# MobileNetV2 (Sandler et al. 2018; torchvision.models.mobilenetv2)
# ---------------------------------------------------------------------------

class InvertedResidual(nn.Module):
    def __init__(self, cin, cout, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=nn.ReLU6)]
        layers += [conv_bn(hidden, hidden, 3, stride, groups=hidden, act=nn.ReLU6),
                   conv_bn(hidden, cout, 1, act=None)]
        self.conv = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    # (t, c, n, s) as torchvision's inverted_residual_setting, widths / 4, fewer repeats
    SETTING = ((1, 4, 1, 1), (6, 6, 2, 2), (6, 8, 2, 2), (6, 16, 2, 2), (6, 24, 1, 1), (6, 40, 2, 2), (6, 80, 1, 1))
    # torchvision's mobilenet_v2 (width 1.0): stem 32, last 1280
    FULL_SETTING = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                    (6, 320, 1, 1))

    def __init__(self, num_classes=10, last=160, setting=None, stem=8):
        super().__init__()
        layers = [conv_bn(3, stem, 3, 2, act=nn.ReLU6)]
        cin = stem
        for t, c, n, s in (setting or self.SETTING):
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(conv_bn(cin, last, 1, act=nn.ReLU6))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------------------
# SqueezeNet 1.1 (Iandola et al. 2016; torchvision.models.squeezenet)
# ---------------------------------------------------------------------------

class Fire(nn.Module):
    def __init__(self, cin, squeeze, e1, e3):
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
        self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)

    def forward(self, x):
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1x1(x)), F.relu(self.expand3x3(x))], 1)


class SqueezeNet(nn.Module):
    """SqueezeNet 1.1 with torchvision's widths divided by `div` (4 by
    default; 1 is torchvision's squeezenet1_1), ceil-mode max pools as
    torchvision."""

    def __init__(self, num_classes=10, div=4):
        super().__init__()

        def fire(cin, squeeze, expand):
            return Fire(cin // div, squeeze // div, expand // div, expand // div)
        self.features = nn.Sequential(
            nn.Conv2d(3, 64 // div, 3, 2), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
            fire(64, 16, 64), fire(128, 16, 64), nn.MaxPool2d(3, 2, ceil_mode=True),
            fire(128, 32, 128), fire(256, 32, 128), nn.MaxPool2d(3, 2, ceil_mode=True),
            fire(256, 48, 192), fire(384, 48, 192), fire(384, 64, 256), fire(512, 64, 256))
        self.classifier = nn.Sequential(nn.Dropout(0.5), nn.Conv2d(512 // div, num_classes, 1),
                                        nn.ReLU(inplace=True), nn.AdaptiveAvgPool2d((1, 1)))

    def forward(self, x):
        return torch.flatten(self.classifier(self.features(x)), 1)


# ---------------------------------------------------------------------------
# ShuffleNetV2 (Ma et al. 2018; torchvision.models.shufflenetv2)
# ---------------------------------------------------------------------------

def channel_shuffle(x, groups):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w)
    x = torch.transpose(x, 1, 2).contiguous()
    return x.view(b, -1, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.stride = stride
        branch = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(conv_bn(cin, cin, 3, stride, groups=cin, act=None),
                                         conv_bn(cin, branch, 1))
        else:
            self.branch1 = nn.Sequential()
        b2_in = cin if stride > 1 else branch
        self.branch2 = nn.Sequential(conv_bn(b2_in, branch, 1), conv_bn(branch, branch, 3, stride, groups=branch,
                                                                         act=None), conv_bn(branch, branch, 1))

    def forward(self, x):
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    """ShuffleNetV2 x0.5 layout with stages (2, 2, 2) units and widths / 2;
    the head is torchvision's x.mean([2, 3]) (a ReduceMean)."""

    def __init__(self, widths=(12, 24, 48, 96, 256), repeats=(2, 2, 2), num_classes=10):
        super().__init__()
        self.conv1 = conv_bn(3, widths[0], 3, 2)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        cin = widths[0]
        stages = []
        for reps, cout in zip(repeats, widths[1:4]):
            units = [ShuffleUnit(cin, cout, 2)] + [ShuffleUnit(cout, cout, 1) for _ in range(reps - 1)]
            stages.append(nn.Sequential(*units))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.conv5 = conv_bn(cin, widths[4], 1)
        self.fc = nn.Linear(widths[4], num_classes)

    def forward(self, x):
        x = self.conv5(self.stages(self.maxpool(self.conv1(x))))
        return self.fc(x.mean([2, 3]))


# ---------------------------------------------------------------------------
# Squeeze-and-excitation: MobileNetV3 (Howard et al. 2019) and EfficientNet
# (Tan & Le 2019) blocks
# ---------------------------------------------------------------------------

class SqueezeExcitation(nn.Module):
    """torchvision.ops.SqueezeExcitation: avg pool, 1x1 conv, activation, 1x1
    conv, scale activation, x * scale ([N, C, 1, 1] broadcast)."""

    def __init__(self, c, squeeze, act=nn.ReLU, scale_act=nn.Hardsigmoid):
        super().__init__()
        self.fc1 = nn.Conv2d(c, squeeze, 1)
        self.fc2 = nn.Conv2d(squeeze, c, 1)
        self.act = act()
        self.scale_act = scale_act()

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = self.scale_act(self.fc2(self.act(self.fc1(s))))
        return s * x


class MBConvV3(nn.Module):
    """MobileNetV3's InvertedResidual: expand (1x1), depthwise (k x k), SE,
    project; HardSwish or ReLU."""

    def __init__(self, cin, k, exp, cout, use_se, act, stride):
        super().__init__()
        layers = []
        if exp != cin:
            layers.append(conv_bn(cin, exp, 1, act=act))
        layers.append(conv_bn(exp, exp, k, stride, groups=exp, act=act))
        if use_se:
            layers.append(SqueezeExcitation(exp, make_divisible(exp // 4, 8)))
        layers.append(conv_bn(exp, cout, 1, act=None))
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class MobileNetV3Small(nn.Module):
    # torchvision's mobilenet_v3_small bneck table (in, k, exp, out, SE, act, stride), widths / 2, trimmed
    SETTING = ((8, 3, 8, 8, True, nn.ReLU, 2), (8, 3, 36, 12, False, nn.ReLU, 2),
               (12, 3, 44, 12, False, nn.ReLU, 1), (12, 5, 48, 20, True, nn.Hardswish, 2),
               (20, 5, 120, 20, True, nn.Hardswish, 1), (20, 5, 60, 24, True, nn.Hardswish, 1),
               (24, 5, 144, 48, True, nn.Hardswish, 2))
    # torchvision's mobilenet_v3_small as it is: stem 16, last 576, hidden 1024
    FULL_SETTING = ((16, 3, 16, 16, True, nn.ReLU, 2), (16, 3, 72, 24, False, nn.ReLU, 2),
                    (24, 3, 88, 24, False, nn.ReLU, 1), (24, 5, 96, 40, True, nn.Hardswish, 2),
                    (40, 5, 240, 40, True, nn.Hardswish, 1), (40, 5, 240, 40, True, nn.Hardswish, 1),
                    (40, 5, 120, 48, True, nn.Hardswish, 1), (48, 5, 144, 48, True, nn.Hardswish, 1),
                    (48, 5, 288, 96, True, nn.Hardswish, 2), (96, 5, 576, 96, True, nn.Hardswish, 1),
                    (96, 5, 576, 96, True, nn.Hardswish, 1))

    def __init__(self, num_classes=10, setting=None, stem=8, last=288, hidden=512):
        super().__init__()
        setting = setting or self.SETTING
        layers = [conv_bn(3, stem, 3, 2, act=nn.Hardswish)]
        layers += [MBConvV3(*cfg) for cfg in setting]
        layers.append(conv_bn(setting[-1][3], last, 1, act=nn.Hardswish))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Linear(last, hidden), nn.Hardswish(), nn.Dropout(0.2),
                                        nn.Linear(hidden, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


class MBConvEfficientNet(nn.Module):
    """EfficientNet's MBConv: SiLU activations (Sigmoid * x), SE with SiLU and
    Sigmoid gate."""

    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        hidden = cin * expand
        layers = [] if expand == 1 else [conv_bn(cin, hidden, 1, act=nn.SiLU)]
        layers += [conv_bn(hidden, hidden, k, stride, groups=hidden, act=nn.SiLU),
                   SqueezeExcitation(hidden, max(1, cin // 4), act=nn.SiLU, scale_act=nn.Sigmoid),
                   conv_bn(hidden, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class EfficientNetB0Slim(nn.Module):
    # (expand, k, stride, in, out, layers) as torchvision's efficientnet_b0, widths / 4, depth trimmed
    SETTING = ((1, 3, 1, 8, 4, 1), (6, 3, 2, 4, 6, 2), (6, 5, 2, 6, 10, 1), (6, 3, 2, 10, 20, 2),
               (6, 5, 1, 20, 28, 1), (6, 5, 2, 28, 48, 1))

    # torchvision's efficientnet_b0 as it is: stem 32, last 1280
    FULL_SETTING = ((1, 3, 1, 32, 16, 1), (6, 3, 2, 16, 24, 2), (6, 5, 2, 24, 40, 2), (6, 3, 2, 40, 80, 3),
                    (6, 5, 1, 80, 112, 3), (6, 5, 2, 112, 192, 4), (6, 3, 1, 192, 320, 1))

    def __init__(self, num_classes=10, setting=None, stem=8, last=160):
        super().__init__()
        setting = setting or self.SETTING
        layers = [conv_bn(3, stem, 3, 2, act=nn.SiLU)]
        for e, k, s, cin, cout, n in setting:
            for i in range(n):
                layers.append(MBConvEfficientNet(cin if i == 0 else cout, cout, k, s if i == 0 else 1, e))
        layers.append(conv_bn(setting[-1][4], last, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------------------
# U-Net (Ronneberger et al. 2015): encoder / decoder with ConvTranspose
# up-sampling and skip concatenation
# ---------------------------------------------------------------------------

class DoubleConv(nn.Sequential):
    def __init__(self, cin, cout):
        super().__init__(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.1),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.LeakyReLU(0.1))


class UNet(nn.Module):
    def __init__(self, cin=3, classes=2, widths=(8, 16, 32, 64)):
        super().__init__()
        self.downs = nn.ModuleList()
        c = cin
        for w in widths[:-1]:
            self.downs.append(DoubleConv(c, w))
            c = w
        self.bottom = DoubleConv(c, widths[-1])
        self.ups = nn.ModuleList()
        self.up_convs = nn.ModuleList()
        c = widths[-1]
        for w in reversed(widths[:-1]):
            self.ups.append(nn.ConvTranspose2d(c, w, 2, stride=2))
            self.up_convs.append(DoubleConv(2 * w, w))
            c = w
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        skips = []
        for down in self.downs:
            x = down(x)
            skips.append(x)
            x = F.max_pool2d(x, 2)
        x = self.bottom(x)
        for up, conv, skip in zip(self.ups, self.up_convs, reversed(skips)):
            x = conv(torch.cat([skip, up(x)], dim=1))
        return torch.tanh(self.head(x))


# ---------------------------------------------------------------------------
# Segmentation head (FCN / DeepLab style): strided encoder, 1x1 classifier,
# bilinear up-sampling back to the input size
# ---------------------------------------------------------------------------

class SegHead(nn.Module):
    def __init__(self, classes=3, align_corners=False):
        super().__init__()
        self.encoder = nn.Sequential(conv_bn(3, 8, 3, 2), conv_bn(8, 16, 3, 2), conv_bn(16, 16, 3, 1))
        self.aux = nn.Conv2d(8, classes, 1)
        self.classifier = nn.Conv2d(16, classes, 1)
        self.align_corners = align_corners

    def forward(self, x):
        f1 = self.encoder[0](x)
        y = self.classifier(self.encoder[2](self.encoder[1](f1)))
        y = F.interpolate(y, size=f1.shape[-2:], mode="bilinear", align_corners=self.align_corners)
        y = y + self.aux(f1)
        return F.interpolate(y, scale_factor=2.0, mode="bilinear", align_corners=self.align_corners)


# ---------------------------------------------------------------------------
# VGG (Simonyan & Zisserman 2014; torchvision.models.vgg)
# ---------------------------------------------------------------------------

class VGG(nn.Module):
    """torchvision's VGG: 3x3 conv stacks (with BatchNorm for the _bn
    variants) and 2x2 max pools, adaptive average pool, three fully connected
    layers.  `cfg` uses torchvision's notation (ints: conv widths, "M": pool);
    `pool` is the adaptive pool's size (7 in torchvision, where 224x224 inputs
    reach it at 7x7)."""

    def __init__(self, cfg, batch_norm=False, pool=1, hidden=64, num_classes=10):
        super().__init__()
        layers, c = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
                continue
            layers.append(nn.Conv2d(c, v, 3, padding=1))
            if batch_norm:
                layers.append(nn.BatchNorm2d(v))
            layers.append(nn.ReLU(inplace=True))
            c = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(pool)
        self.classifier = nn.Sequential(nn.Linear(c * pool * pool, hidden), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(hidden, hidden), nn.ReLU(True), nn.Dropout(),
                                        nn.Linear(hidden, num_classes))

    def forward(self, x):
        return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))


# ---------------------------------------------------------------------------
# DenseNet (Huang et al. 2017; torchvision.models.densenet)
# ---------------------------------------------------------------------------

class DenseLayer(nn.Module):
    """Pre-activation bottleneck: BN-ReLU-1x1 conv (bn_size * growth) then
    BN-ReLU-3x3 conv (growth); the BatchNorms follow a Concat, not a conv, so
    no exporter can fold them into one."""

    def __init__(self, cin, growth, bn_size):
        super().__init__()
        self.norm1 = nn.BatchNorm2d(cin)
        self.conv1 = nn.Conv2d(cin, bn_size * growth, 1, bias=False)
        self.norm2 = nn.BatchNorm2d(bn_size * growth)
        self.conv2 = nn.Conv2d(bn_size * growth, growth, 3, padding=1, bias=False)

    def forward(self, x):
        y = self.conv1(F.relu(self.norm1(x)))
        return torch.cat([x, self.conv2(F.relu(self.norm2(y)))], 1)


class DenseNet(nn.Module):
    """torchvision's DenseNet: 7x7/2 stem, 3x3/2 max pool, dense blocks joined
    by transitions (BN-ReLU-1x1 conv halving the channels, 2x2 average pool),
    final BN-ReLU, global average pool, fully connected."""

    def __init__(self, growth=8, blocks=(2, 2, 2), init=16, bn_size=4, num_classes=10):
        super().__init__()
        layers = [nn.Conv2d(3, init, 7, 2, 3, bias=False), nn.BatchNorm2d(init), nn.ReLU(inplace=True),
                  nn.MaxPool2d(3, 2, 1)]
        c = init
        for i, n in enumerate(blocks):
            for _ in range(n):
                layers.append(DenseLayer(c, growth, bn_size))
                c += growth
            if i != len(blocks) - 1:
                layers += [nn.BatchNorm2d(c), nn.ReLU(inplace=True), nn.Conv2d(c, c // 2, 1, bias=False),
                           nn.AvgPool2d(2, 2)]
                c //= 2
        layers.append(nn.BatchNorm2d(c))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Linear(c, num_classes)

    def forward(self, x):
        x = F.adaptive_avg_pool2d(F.relu(self.features(x)), (1, 1))
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------------------
# MNASNet (Tan et al. 2019; torchvision.models.mnasnet)
# ---------------------------------------------------------------------------

class MNASNet(nn.Module):
    """torchvision's MNASNet: a depthwise-separable stem, stacks of inverted
    residuals (ReLU, no SE, 3x3 or 5x5 depthwise), 1x1 head conv, mean over
    the spatial axes, dropout and a fully connected layer."""

    # (in, out, kernel, stride, expansion, repeats) as torchvision's _stack calls, widths / 4, repeats trimmed
    SETTING = ((4, 6, 3, 2, 3, 2), (6, 10, 5, 2, 3, 1), (10, 20, 5, 2, 6, 2), (20, 24, 3, 1, 6, 1),
               (24, 48, 5, 2, 6, 1), (48, 80, 3, 1, 6, 1))

    # torchvision's mnasnet1_0 as it is: stem 32 -> 16, last 1280
    FULL_SETTING = ((16, 24, 3, 2, 3, 3), (24, 40, 5, 2, 3, 3), (40, 80, 5, 2, 6, 3), (80, 96, 3, 1, 6, 2),
                    (96, 192, 5, 2, 6, 4), (192, 320, 3, 1, 6, 1))

    def __init__(self, num_classes=10, last=320, setting=None, stem=8):
        super().__init__()
        setting = setting or self.SETTING
        first = setting[0][0]
        layers = [conv_bn(3, stem, 3, 2), conv_bn(stem, stem, 3, 1, groups=stem), conv_bn(stem, first, 1, act=None)]
        for cin, cout, k, s, e, n in setting:
            for i in range(n):
                layers.append(MBConvMNAS(cin if i == 0 else cout, cout, k, s if i == 0 else 1, e))
        layers.append(conv_bn(setting[-1][1], last, 1))
        self.layers = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        return self.classifier(self.layers(x).mean([2, 3]))


class MBConvMNAS(nn.Module):
    """torchvision's _InvertedResidual of MNASNet: 1x1 expand, k x k
    depthwise, 1x1 project, ReLU, identity shortcut at stride 1."""

    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        hidden = cin * expand
        self.layers = nn.Sequential(conv_bn(cin, hidden, 1), conv_bn(hidden, hidden, k, stride, groups=hidden),
                                    conv_bn(hidden, cout, 1, act=None))
        self.use_res = cin == cout and stride == 1

    def forward(self, x):
        return self.layers(x) + x if self.use_res else self.layers(x)


# ---------------------------------------------------------------------------
# EfficientNetV2 (Tan & Le 2021; torchvision.models.efficientnet_v2_*):
# Fused-MBConv early stages, MBConv with SE later
# ---------------------------------------------------------------------------

class FusedMBConv(nn.Module):
    """torchvision's FusedMBConv: a k x k conv does the expansion (and the
    stride), then a 1x1 projection; with expansion 1 the k x k conv alone.
    SiLU, no SE, identity shortcut at stride 1 with equal widths."""

    def __init__(self, cin, cout, k, stride, expand):
        super().__init__()
        hidden = cin * expand
        if expand == 1:
            layers = [conv_bn(cin, cout, k, stride, act=nn.SiLU)]
        else:
            layers = [conv_bn(cin, hidden, k, stride, act=nn.SiLU), conv_bn(hidden, cout, 1, act=None)]
        self.block = nn.Sequential(*layers)
        self.use_res = stride == 1 and cin == cout

    def forward(self, x):
        y = self.block(x)
        return y + x if self.use_res else y


class EfficientNetV2Slim(nn.Module):
    # (block, expand, k, stride, in, out, layers) as torchvision's efficientnet_v2_s, widths / 3, depth trimmed
    SETTING = (("fused", 1, 3, 1, 8, 8, 2), ("fused", 4, 3, 2, 8, 16, 2), ("fused", 4, 3, 2, 16, 24, 1),
               ("mb", 4, 3, 2, 24, 40, 2), ("mb", 6, 3, 1, 40, 56, 1), ("mb", 6, 3, 2, 56, 88, 1))

    # torchvision's efficientnet_v2_s as it is: stem 24, last 1280
    FULL_SETTING = (("fused", 1, 3, 1, 24, 24, 2), ("fused", 4, 3, 2, 24, 48, 4), ("fused", 4, 3, 2, 48, 64, 4),
                    ("mb", 4, 3, 2, 64, 128, 6), ("mb", 6, 3, 1, 128, 160, 9), ("mb", 6, 3, 2, 160, 256, 15))

    def __init__(self, num_classes=10, last=320, setting=None, stem=8):
        super().__init__()
        setting = setting or self.SETTING
        layers = [conv_bn(3, stem, 3, 2, act=nn.SiLU)]
        for kind, e, k, s, cin, cout, n in setting:
            block = FusedMBConv if kind == "fused" else MBConvEfficientNet
            for i in range(n):
                layers.append(block(cin if i == 0 else cout, cout, k, s if i == 0 else 1, e))
        layers.append(conv_bn(setting[-1][5], last, 1, act=nn.SiLU))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last, num_classes))

    def forward(self, x):
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------------------
# RegNet (Radosavovic et al. 2020; torchvision.models.regnet): X (no SE) and
# Y (SE) bottlenecks with grouped 3x3 convs of a fixed group width
# ---------------------------------------------------------------------------

class RegNetBlock(nn.Module):
    """torchvision's ResBottleneckBlock (bottleneck multiplier 1): 1x1, grouped
    3x3 (stride here), optional SE (squeeze = se_ratio x block input width,
    ReLU, Sigmoid), 1x1 without activation, ReLU after the residual add."""

    def __init__(self, cin, cout, stride, group_width, se_ratio):
        super().__init__()
        groups = cout // group_width
        layers = [conv_bn(cin, cout, 1), conv_bn(cout, cout, 3, stride, groups=groups)]
        if se_ratio:
            layers.append(SqueezeExcitation(cout, int(round(se_ratio * cin)), act=nn.ReLU, scale_act=nn.Sigmoid))
        layers.append(conv_bn(cout, cout, 1, act=None))
        self.f = nn.Sequential(*layers)
        self.proj = conv_bn(cin, cout, 1, stride, act=None) if (cin != cout or stride != 1) else None

    def forward(self, x):
        return F.relu((x if self.proj is None else self.proj(x)) + self.f(x))


class RegNet(nn.Module):
    """torchvision's RegNet: 3x3/2 stem (ReLU), stages of RegNetBlocks each
    starting at stride 2, global average pool, fully connected.  Defaults:
    RegNetY-400MF's group width 8 and SE ratio 0.25 with widths and depths cut."""

    def __init__(self, widths=(16, 24, 48, 96), depths=(1, 1, 2, 1), group_width=8, se_ratio=0.25,
                 num_classes=10, stem=16):
        super().__init__()
        layers = [conv_bn(3, stem, 3, 2)]
        c = stem
        for w, d in zip(widths, depths):
            for i in range(d):
                layers.append(RegNetBlock(c, w, 2 if i == 0 else 1, group_width, se_ratio))
                c = w
        self.trunk = nn.Sequential(*layers)
        self.fc = nn.Linear(c, num_classes)

    def forward(self, x):
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(self.trunk(x), 1), 1))


# ---------------------------------------------------------------------------
# 1-D vocoder stack (HiFi-GAN generator, Kong et al. 2020): conv1d,
# conv_transpose1d up-sampling, leaky ReLU and residual blocks of dilated
# conv1d, mean of the blocks, tanh
# ---------------------------------------------------------------------------

class VocoderResBlock(nn.Module):
    def __init__(self, c, k, dilations):
        super().__init__()
        self.convs1 = nn.ModuleList(nn.Conv1d(c, c, k, dilation=d, padding=d * (k - 1) // 2) for d in dilations)
        self.convs2 = nn.ModuleList(nn.Conv1d(c, c, k, padding=(k - 1) // 2) for _ in dilations)

    def forward(self, x):
        for c1, c2 in zip(self.convs1, self.convs2):
            x = x + c2(F.leaky_relu(c1(F.leaky_relu(x, 0.1)), 0.1))
        return x


class Vocoder1d(nn.Module):
    """HiFi-GAN's generator at reduced width: mel frames [N, mels, T] ->
    waveform [N, 1, T x prod(rates)]."""

    def __init__(self, mels=16, channels=32, rates=(4, 4), kernels=(3, 5), dilations=(1, 3)):
        super().__init__()
        self.pre = nn.Conv1d(mels, channels, 7, padding=3)
        self.ups = nn.ModuleList()
        self.blocks = nn.ModuleList()
        c = channels
        for r in rates:
            self.ups.append(nn.ConvTranspose1d(c, c // 2, 2 * r, stride=r, padding=r // 2))
            c //= 2
            self.blocks.append(nn.ModuleList(VocoderResBlock(c, k, dilations) for k in kernels))
        self.post = nn.Conv1d(c, 1, 7, padding=3)

    def forward(self, x):
        x = self.pre(x)
        for up, blocks in zip(self.ups, self.blocks):
            x = up(F.leaky_relu(x, 0.1))
            y = None
            for b in blocks:
                y = b(x) if y is None else y + b(x)
            x = y / len(blocks)
        return torch.tanh(self.post(F.leaky_relu(x)))


# torchvision's VGG cfg "A" (vgg11)
VGG11_CFG = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")

# name -> (constructor, input shape): the reduced zoo the model tests and
# `python -m rlx_cpu run --zoo` run (the CLI's --resolution replaces the
# spatial size, or the frame count of the 1-D vocoder).
MODELS = {
    "resnet_basic": (lambda: ResNet(BasicBlock, (2, 1, 1, 1), width=8), (2, 3, 64, 64)),
    "resnet_bottleneck": (lambda: ResNet(Bottleneck, (1, 1, 1, 1), width=8), (2, 3, 64, 64)),
    "resnext_bottleneck": (lambda: ResNet(Bottleneck, (1, 1, 1, 1), width=8, groups=4, base_width=16),
                           (1, 3, 64, 64)),
    # wide_resnet50_2: torchvision's width_per_group=128 (twice the bottleneck width)
    "wide_resnet_bottleneck": (lambda: ResNet(Bottleneck, (1, 1, 1, 1), width=8, base_width=128),
                               (1, 3, 64, 64)),
    # vgg11 / vgg11_bn: torchvision's cfg "A" with widths / 8
    "vgg11": (lambda: VGG((8, "M", 16, "M", 32, 32, "M", 64, 64, "M", 64, 64, "M")), (2, 3, 32, 32)),
    "vgg11_bn": (lambda: VGG((8, "M", 16, "M", 32, 32, "M", 64, 64, "M", 64, 64, "M"), batch_norm=True),
                 (2, 3, 32, 32)),
    "densenet": (DenseNet, (2, 3, 64, 64)),
    "mobilenet_v2": (MobileNetV2, (2, 3, 64, 64)),
    "mobilenet_v3_small": (MobileNetV3Small, (2, 3, 64, 64)),
    "mnasnet": (MNASNet, (2, 3, 64, 64)),
    "squeezenet1_1": (SqueezeNet, (2, 3, 64, 64)),
    "shufflenet_v2": (ShuffleNetV2, (2, 3, 64, 64)),
    "efficientnet_b0_slim": (EfficientNetB0Slim, (2, 3, 64, 64)),
    "efficientnet_v2_slim": (EfficientNetV2Slim, (2, 3, 64, 64)),
    "regnet_x": (lambda: RegNet(se_ratio=0), (2, 3, 64, 64)),
    "regnet_y": (RegNet, (2, 3, 64, 64)),
    "unet": (UNet, (1, 3, 32, 32)),
    "seg_head_bilinear": (SegHead, (1, 3, 32, 32)),
    "seg_head_bilinear_align_corners": (lambda: SegHead(align_corners=True), (1, 3, 32, 32)),
    "vocoder_1d": (Vocoder1d, (1, 16, 32)),
}

# torchvision's real configurations (1000 classes, 224x224): what the speed
# comparison runs (`python -m rlx_cpu run --zoo --models resnet18,resnet50,mobilenet_v2_full`);
# too slow for the test suite.
FULL_MODELS = {
    "resnet18": (lambda: ResNet(BasicBlock, (2, 2, 2, 2), width=64, num_classes=1000), (1, 3, 224, 224)),
    "resnet50": (lambda: ResNet(Bottleneck, (3, 4, 6, 3), width=64, num_classes=1000), (1, 3, 224, 224)),
    "mobilenet_v2_full": (lambda: MobileNetV2(num_classes=1000, last=1280, setting=MobileNetV2.FULL_SETTING,
                                              stem=32), (1, 3, 224, 224)),
    "resnext50_32x4d": (lambda: ResNet(Bottleneck, (3, 4, 6, 3), width=64, num_classes=1000, groups=32,
                                       base_width=4), (1, 3, 224, 224)),
    "wide_resnet50_2": (lambda: ResNet(Bottleneck, (3, 4, 6, 3), width=64, num_classes=1000, base_width=128),
                        (1, 3, 224, 224)),
    "vgg11_full": (lambda: VGG(VGG11_CFG, pool=7, hidden=4096, num_classes=1000), (1, 3, 224, 224)),
    "vgg11_bn_full": (lambda: VGG(VGG11_CFG, batch_norm=True, pool=7, hidden=4096, num_classes=1000),
                      (1, 3, 224, 224)),
    "densenet121": (lambda: DenseNet(growth=32, blocks=(6, 12, 24, 16), init=64, bn_size=4, num_classes=1000),
                    (1, 3, 224, 224)),
    "squeezenet1_1_full": (lambda: SqueezeNet(num_classes=1000, div=1), (1, 3, 224, 224)),
    "shufflenet_v2_x1_0": (lambda: ShuffleNetV2(widths=(24, 116, 232, 464, 1024), repeats=(4, 8, 4),
                                                num_classes=1000), (1, 3, 224, 224)),
    "mobilenet_v3_small_full": (lambda: MobileNetV3Small(num_classes=1000, setting=MobileNetV3Small.FULL_SETTING,
                                                         stem=16, last=576, hidden=1024), (1, 3, 224, 224)),
    "mnasnet1_0": (lambda: MNASNet(num_classes=1000, last=1280, setting=MNASNet.FULL_SETTING, stem=32),
                   (1, 3, 224, 224)),
    "efficientnet_b0": (lambda: EfficientNetB0Slim(num_classes=1000, setting=EfficientNetB0Slim.FULL_SETTING,
                                                   stem=32, last=1280), (1, 3, 224, 224)),
    "efficientnet_v2_s": (lambda: EfficientNetV2Slim(num_classes=1000, last=1280,
                                                     setting=EfficientNetV2Slim.FULL_SETTING, stem=24),
                          (1, 3, 224, 224)),
    "regnet_x_400mf": (lambda: RegNet(widths=(32, 64, 160, 400), depths=(1, 2, 7, 12), group_width=16, se_ratio=0,
                                      num_classes=1000, stem=32), (1, 3, 224, 224)),
    "regnet_y_400mf": (lambda: RegNet(widths=(48, 104, 208, 440), depths=(1, 3, 6, 6), group_width=8,
                                      se_ratio=0.25, num_classes=1000, stem=32), (1, 3, 224, 224)),
}

# torchvision's published parameter counts of the models above (its model
# docs): tests/test_zoo.py checks each definition against them.
TORCHVISION_PARAMS = {
    "resnet18": 11689512, "resnet50": 25557032, "mobilenet_v2_full": 3504872, "resnext50_32x4d": 25028904,
    "wide_resnet50_2": 68883240, "vgg11_full": 132863336, "vgg11_bn_full": 132868840, "densenet121": 7978856,
    "squeezenet1_1_full": 1235496, "shufflenet_v2_x1_0": 2278604, "mobilenet_v3_small_full": 2542856,
    "mnasnet1_0": 4383312, "efficientnet_b0": 5288548, "efficientnet_v2_s": 21458488, "regnet_x_400mf": 5495976,
    "regnet_y_400mf": 4344144,
}
