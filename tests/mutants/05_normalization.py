"""Set 05 (normalization): known-wrong answers to its exercises (MUTANTS), as source code,
and the words each likely one's visible check must say (HINTS). See tests/mutants/__init__.py."""

_BATCH_NORM = ("def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
               "    mean, var = {statistics}\n    return {normalized}")
_TRAINING_OR_RUNNING = "batch_stats(x) if training else (running_mean, running_var)"
_UPDATE = ("def update_running(running_mean, running_var, x, momentum):\n"
           "    mean, var = batch_stats(x)\n    n = {n}\n"
           "    return (1 - momentum) * running_mean + momentum * mean, "
           "(1 - momentum) * running_var + momentum * var * n / (n - 1)")
MUTANTS = {
    "batch_stats": {
        "unbiased variance": "def batch_stats(x):\n    flat = x.reshape(-1, x.shape[-1])\n    return flat.mean(0), flat.var(0)",
        "over the features (LayerNorm's axis)": "def batch_stats(x):\n    return x.mean(-1), x.var(-1, unbiased=False)",
        "over the batch axis only": "def batch_stats(x):\n    return x.mean(0), x.var(0, unbiased=False)",
        "over the positions only": "def batch_stats(x):\n    return x.mean(-2), x.var(-2, unbiased=False)",
        "no mean subtraction": "def batch_stats(x):\n    flat = x.reshape(-1, x.shape[-1])\n"
                               "    return flat.mean(0), (flat ** 2).mean(0)",
        "std instead of var": "def batch_stats(x):\n    flat = x.reshape(-1, x.shape[-1])\n"
                              "    return flat.mean(0), flat.std(0, unbiased=False)",
        "keepdim=True": "def batch_stats(x):\n    flat = x.reshape(-1, x.shape[-1])\n"
                        "    return flat.mean(0, keepdim=True), flat.var(0, unbiased=False, keepdim=True)",
        "calls the course reference": "from course_lib.normalization import batch_statistics as stats\n"
                                      "def batch_stats(x):\n    return stats(x)[:2]",
    },
    "batch_norm_forward": {
        "batch statistics in eval mode": "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                                         "    mean, var = batch_stats(x)\n"
                                         "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "eps outside the square root": "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                                       "    mean, var = batch_stats(x) if training else (running_mean, running_var)\n"
                                       "    return (x - mean) / (torch.sqrt(var) + eps) * gamma + beta",
        "unbiased variance": "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                             "    flat = x.reshape(-1, x.shape[-1])\n"
                             "    mean, var = (flat.mean(0), flat.var(0)) if training else (running_mean, running_var)\n"
                             "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "gamma and beta swapped": "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                                  "    mean, var = batch_stats(x) if training else (running_mean, running_var)\n"
                                  "    return (x - mean) / torch.sqrt(var + eps) * beta + gamma",
        "running statistics in training": _BATCH_NORM.format(statistics="(running_mean, running_var)",
                                                             normalized="(x - mean) / torch.sqrt(var + eps) * gamma + beta"),
        "no eps": _BATCH_NORM.format(statistics=_TRAINING_OR_RUNNING,
                                     normalized="(x - mean) / torch.sqrt(var) * gamma + beta"),
        "no square root": _BATCH_NORM.format(statistics=_TRAINING_OR_RUNNING,
                                             normalized="(x - mean) / (var + eps) * gamma + beta"),
        "no gamma and beta": _BATCH_NORM.format(statistics=_TRAINING_OR_RUNNING,
                                                normalized="(x - mean) / torch.sqrt(var + eps)"),
        "calls F.batch_norm": "import torch.nn.functional as F\n"
                              "def batch_norm_forward(x, gamma, beta, running_mean, running_var, training, eps=1e-5):\n"
                              "    xt = x.transpose(1, 2) if x.dim() == 3 else x\n"
                              "    y = F.batch_norm(xt, running_mean.clone(), running_var.clone(), gamma, beta, training, 0.0, eps)\n"
                              "    return y.transpose(1, 2) if x.dim() == 3 else y",
    },
    "update_running": {
        "biased variance averaged": "def update_running(running_mean, running_var, x, momentum):\n"
                                    "    mean, var = batch_stats(x)\n"
                                    "    return (1 - momentum) * running_mean + momentum * mean, (1 - momentum) * running_var + momentum * var",
        "momentum on the wrong side": "def update_running(running_mean, running_var, x, momentum):\n"
                                      "    mean, var = batch_stats(x)\n    n = x.numel() // x.shape[-1]\n"
                                      "    return momentum * running_mean + (1 - momentum) * mean, "
                                      "momentum * running_var + (1 - momentum) * var * n / (n - 1)",
        "n is the batch size": _UPDATE.format(n="x.shape[0]"),
        "n counts every number": _UPDATE.format(n="x.numel()"),
        "updates in place": "def update_running(running_mean, running_var, x, momentum):\n"
                            "    mean, var = batch_stats(x)\n    n = x.numel() // x.shape[-1]\n"
                            "    running_mean.mul_(1 - momentum).add_(momentum * mean)\n"
                            "    running_var.mul_(1 - momentum).add_(momentum * var * n / (n - 1))\n"
                            "    return running_mean, running_var",
        "calls nn.BatchNorm1d": "def update_running(running_mean, running_var, x, momentum):\n"
                                "    bn = torch.nn.BatchNorm1d(x.shape[-1], momentum=momentum).to(x.dtype)\n"
                                "    bn.running_mean.copy_(running_mean); bn.running_var.copy_(running_var)\n"
                                "    bn(x.reshape(-1, x.shape[-1]))\n"
                                "    return bn.running_mean.clone(), bn.running_var.clone()",
    },
    "layer_norm_rows": {
        "unbiased variance (torch.var's default)": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                                                   "    mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True)\n"
                                                   "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "statistics over the batch axis": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                                          "    mean, var = x.mean(0), x.var(0, unbiased=False)\n"
                                          "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "eps outside the square root": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                                       "    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)\n"
                                       "    return (x - mean) / (torch.sqrt(var) + eps) * gamma + beta",
        "gamma and beta swapped": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                                  "    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)\n"
                                  "    return (x - mean) / torch.sqrt(var + eps) * beta + gamma",
        "no keepdim": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                      "    mean, var = x.mean(-1), x.var(-1, unbiased=False)\n"
                      "    return (x - mean) / torch.sqrt(var + eps) * gamma + beta",
        "no eps": "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                  "    mean, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)\n"
                  "    return (x - mean) / torch.sqrt(var) * gamma + beta",
        "calls F.layer_norm": "import torch.nn.functional as F\n"
                              "def layer_norm_rows(x, gamma, beta, eps=1e-5):\n"
                              "    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)",
    },
    "rms_norm_rows": {
        "subtracts the mean (LayerNorm)": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                                          "    c = x - x.mean(-1, keepdim=True)\n"
                                          "    return c / torch.sqrt((c ** 2).mean(-1, keepdim=True) + eps) * gamma",
        "no square root": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                          "    return x / ((x ** 2).mean(-1, keepdim=True) + eps) * gamma",
        "mean absolute value": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                               "    return x / (x.abs().mean(-1, keepdim=True) + eps) * gamma",
        "eps outside the square root": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                                       "    return x / ((x ** 2).mean(-1, keepdim=True).sqrt() + eps) * gamma",
        "no keepdim": "def rms_norm_rows(x, gamma, eps=1e-6):\n    return x / torch.sqrt((x ** 2).mean(-1) + eps) * gamma",
        "sum instead of mean": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                               "    return x / torch.sqrt((x ** 2).sum(-1, keepdim=True) + eps) * gamma",
        "calls torch's RMSNorm": "def rms_norm_rows(x, gamma, eps=1e-6):\n"
                                 "    return torch.nn.functional.rms_norm(x, (x.shape[-1],), gamma, eps)",
    },
}

# The likely wrong answers above, each with words its visible check's message must contain
# (tests/test_exercises.py asks for at least five per exercise).
HINTS = {
    "batch_stats": {
        "unbiased variance": "unbiased variance",
        "over the features (LayerNorm's axis)": "you averaged over the features",
        "over the batch axis only": "you averaged over the batch axis only",
        "over the positions only": "you averaged over the positions only",
        "no mean subtraction": "forget to subtract the mean before squaring",
        "std instead of var": "the standard deviation instead of the variance",
        "keepdim=True": "keepdim=True",
    },
    "batch_norm_forward": {
        "batch statistics in eval mode": "in eval mode use the running statistics",
        "running statistics in training": "in training mode use the batch statistics",
        "eps outside the square root": "eps belongs inside the square root",
        "unbiased variance": "unbiased variance",
        "gamma and beta swapped": "gamma and beta swapped",
        "no eps": "eps left out",
        "no square root": "no square root",
        "no gamma and beta": "gamma and beta left out",
    },
    "update_running": {
        "biased variance averaged": "the running variance is fed the UNBIASED batch variance",
        "momentum on the wrong side": "momentum on the wrong side",
        "n is the batch size": "n is the batch size",
        "n counts every number": "n counts every number",
        "updates in place": "an in-place operation",
    },
    "layer_norm_rows": {
        "unbiased variance (torch.var's default)": "unbiased variance",
        "statistics over the batch axis": "statistics over the rows (BatchNorm's axis)",
        "eps outside the square root": "eps belongs inside the square root",
        "gamma and beta swapped": "gamma and beta swapped",
        "no keepdim": "the statistics lost their axis",
        "no eps": "eps left out",
    },
    "rms_norm_rows": {
        "subtracts the mean (LayerNorm)": "you subtracted the mean: that is LayerNorm",
        "no square root": "missing square root",
        "mean absolute value": "mean of |x| instead of the root mean square",
        "eps outside the square root": "eps belongs inside the square root",
        "no keepdim": "the root mean square lost its axis",
        "sum instead of mean": "summed the squares instead of averaging them",
    },
}

# Ready-made code under a name no reading of the source catches: its numbers are right, so only what
# runs can refuse it, with a message saying so.
READY_MADE = {
    "rms_norm_rows": {
        "getattr": "import torch.nn.functional as F\ndef rms_norm_rows(x, weight, eps=1e-6):\n"
                   "    return getattr(F, 'rms_' + 'norm')(x, x.shape[-1:], weight, eps)",
    },
}
