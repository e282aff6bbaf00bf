"""Compare two run folders of configs/tiny.yaml: every numeric output must be equal."""
import json, sys
from pathlib import Path
import pandas as pd, torch
a, b = Path(sys.argv[1]), Path(sys.argv[2])
bad = 0
def report(name, ok, detail=""):
    global bad
    bad += not ok
    print(("OK   " if ok else "DIFF ") + name, detail)
for csv in ["data/accuracy.csv", "identify/effects_all.csv", "validate/knockout_add.csv", "validate/knockout_sub.csv",
            "validate/transfer.csv", "analyze/attention_by_role.csv", "analyze/mlp_probes.csv"]:
    x, y = pd.read_csv(a / csv), pd.read_csv(b / csv)
    try:
        pd.testing.assert_frame_equal(x, y, check_exact=True); report(csv, True, f"{x.shape}")
    except AssertionError as e:
        report(csv, False, str(e)[:300])
for pt in ["identify/patching_add.pt", "identify/patching_sub.pt", "identify/patching_all.pt", "validate/knockout_add.pt",
           "validate/head_means.pt"]:
    x, y = torch.load(a / pt, weights_only=True), torch.load(b / pt, weights_only=True)
    fx, fy = x.get("fields", x), y.get("fields", y)
    tens = [k for k, v in fx.items() if isinstance(v, torch.Tensor)]
    ok = all(torch.equal(fx[k], fy[k]) for k in tens)
    report(pt, ok, f"tensors compared bit-exactly: {tens}")
ka, kb = json.loads((a / "identify/key_components.json").read_text()), json.loads((b / "identify/key_components.json").read_text())
for k in ("heads", "mlps", "head_scores", "mlp_scores", "rule"):
    report(f"key_components.{k}", ka[k] == kb[k], str(ka[k]))
for mode in ("precise", "full"):
    ra, rb = (json.loads((r / f"finetune/{mode}/sft_result.json").read_text()) for r in (a, b))
    report(f"finetune/{mode} loss_history", ra["loss_history"] == rb["loss_history"], str(ra["loss_history"]))
    report(f"finetune/{mode} train_loss/steps/n_trainable", (ra["train_loss"], ra["global_step"], ra["n_trainable"]) == (rb["train_loss"], rb["global_step"], rb["n_trainable"]))
    fa = sorted(p.relative_to(a / "finetune" / mode / "final") for p in (a / "finetune" / mode / "final").iterdir())
    from safetensors.torch import load_file
    for f in fa:
        if f.suffix == ".safetensors":
            ta, tb = load_file(a / "finetune" / mode / "final" / f), load_file(b / "finetune" / mode / "final" / f)
            report(f"finetune/{mode}/final/{f} ({len(ta)} tensors)", ta.keys() == tb.keys() and all(torch.equal(ta[k], tb[k]) for k in ta))
ta, tb = pd.read_csv(a / "evaluate/table.csv"), pd.read_csv(b / "evaluate/table.csv")
cols = [c for c in ta.columns if "samples/s" not in c]
report("evaluate/table.csv (without speed)", ta[cols].equals(tb[cols]), str(ta[cols].values.tolist()))
print("differences:", bad)
