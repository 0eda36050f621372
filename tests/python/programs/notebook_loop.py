# SPDX-License-Identifier: MIT
# %% [markdown]
# # Sensor autoencoder
# A dense autoencoder that compresses 128-channel sensor readings to 8 numbers, written as notebook
# cells (`# %%`): flat top-level code, the training loop at top level, a validation loss every few
# steps and the per-channel reconstruction error kept for a plot.
#
# A generalisation program for tw-report --findings (tests/python/test_findings_general.py): the
# lines marked `# PLANTED:<kind>` make a common performance mistake (or are where it costs);
# `--fixed` runs the same training with every one of them fixed.

# %%
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FIXED = "--fixed" in sys.argv[1:]
STEPS, BATCH = 60, 48

# %%
# settings left from last week's NaN hunt
if not FIXED:
    torch.autograd.set_detect_anomaly(True)  # PLANTED:anomaly
    torch.set_num_threads(1)  # PLANTED:threads
torch.manual_seed(0)

# %%
# the readings: 8 hidden factors mixed into 128 channels, with noise (numpy, as loaded from disk)
rng = np.random.default_rng(0)
factors = rng.normal(size=(6000, 8))
mixing = rng.normal(size=(8, 128)) / np.sqrt(8)
readings = np.tanh(factors @ mixing) + 0.05 * rng.normal(size=(6000, 128))
readings = (readings - readings.mean(0)) / readings.std(0)
if FIXED:
    X = torch.from_numpy(readings.astype(np.float32))
else:
    X = torch.from_numpy(readings)  # PLANTED:fp64
X_train, X_val = X[:5000], X[5000:]
X_train.shape, X_train.dtype

# %%
model = nn.Sequential(
    nn.Linear(128, 256), nn.GELU(),
    nn.Linear(256, 64), nn.GELU(),
    nn.Linear(64, 8),
    nn.Linear(8, 64), nn.GELU(),
    nn.Linear(64, 256), nn.GELU(),
    nn.Linear(256, 128),
)
if not FIXED:
    model = model.double()  # PLANTED:fp64   (the data is float64: "expected Double but found Float")
opt = torch.optim.Adam(model.parameters(), lr=2e-3)

# %%
channel_error = torch.zeros(0, 128, dtype=X.dtype)   # every step's per-channel error, for the plot
error_sum, error_count = torch.zeros(128, dtype=X.dtype), 0
val_curve = []
for step in range(STEPS):
    xb = X_train[torch.randint(0, len(X_train), (BATCH,))]
    noisy = xb + 0.1 * torch.randn_like(xb)
    if FIXED:
        recon = model(noisy)
    else:   # the model was tried out on one reading
        recon = torch.stack([model(reading) for reading in noisy])  # PLANTED:per_sample
    loss = F.mse_loss(recon, xb)
    opt.zero_grad()
    loss.backward()
    opt.step()

    if FIXED:
        error_sum += (recon.detach() - xb).pow(2).sum(0)
        error_count += len(xb)
        per_channel = error_sum / error_count
    else:
        channel_error = torch.cat([channel_error, (recon.detach() - xb).pow(2)])  # PLANTED:growing
        per_channel = channel_error.mean(0)  # PLANTED:growing
    worst_channel = per_channel.argmax()

    if step % 5 == 0:
        model.eval()
        if FIXED:
            with torch.no_grad():
                val_loss = F.mse_loss(model(X_val), X_val)
        else:
            val_loss = F.mse_loss(model(X_val), X_val)  # PLANTED:eval_with_grad
        model.train()
        val_curve.append(val_loss.detach())

# %%
print(f"{STEPS} steps: train loss {loss.item():.3f}, validation loss {val_curve[-1].item():.3f}, "
      f"worst channel {int(worst_channel)} ({per_channel.max().item():.3f})")
