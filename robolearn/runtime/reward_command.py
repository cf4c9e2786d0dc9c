"""``robolearn reward train DATASET --out FOLDER``: a success classifier for ``task.reward=classifier``, trained on
a LeRobotDataset v3's labelled frames (``rewards/training.py``); ``robolearn reward info FOLDER`` shows one."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from robolearn.rewards.classifier import load_classifier, read_report
from robolearn.rewards.training import TrainConfig, train_and_save


def _print_scores(report: dict) -> None:
    held = report["held_out"]
    f, e = held["frames"], held["episodes"]
    print(f"held-out episodes: {report['test_episodes']} ({report['test_frames']} frames)")
    print(f"  frames:   precision {f['precision']:.3f}  recall {f['recall']:.3f}  "
          f"(tp {f['true_positives']}, fp {f['false_positives']}, fn {f['false_negatives']})")
    print(f"  episodes: precision {e['precision']:.3f}  recall {e['recall']:.3f}  "
          f"(tp {e['true_positives']}, fp {e['false_positives']}, fn {e['false_negatives']})")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="robolearn reward", description=__doc__)
    sub = ap.add_subparsers(dest="action", required=True)
    train = sub.add_parser("train", help="train a success classifier and report it on held-out episodes")
    train.add_argument("dataset", type=Path, help="a LeRobotDataset v3 folder (robolearn record, buffer export)")
    train.add_argument("--out", type=Path, required=True, help="a new folder for the classifier")
    train.add_argument("--cameras", default="", help="comma-separated cameras to use (default: all)")
    train.add_argument("--state", default="",
                       help="comma-separated observation.state element names or patterns to feed too, e.g. "
                            "'*.pos,tip.*' (joint positions and the tip: what a real arm measures); '*': all of it")
    train.add_argument("--use-state", action="store_true", help="the same as --state '*'")
    train.add_argument("--epochs", type=int, default=TrainConfig.epochs)
    train.add_argument("--holdout", type=float, default=TrainConfig.holdout,
                       help="share of successful and of failed episodes held out for the report")
    train.add_argument("--threshold", type=float, default=TrainConfig.threshold,
                       help="P(success) that counts as one (default 0: chosen on validation episodes)")
    train.add_argument("--min-recall", type=float, default=TrainConfig.min_recall,
                       help="a threshold chosen on validation episodes is the most precise one keeping at least "
                            "this recall there")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--encoder", choices=("flat", "keypoints"), default=TrainConfig.encoder,
                       help="the image encoder: flattened CNN features, or keypoints (spatial softmax)")
    train.add_argument("--shift", type=int, default=TrainConfig.shift, help="random-shift augmentation, pixels")
    info = sub.add_parser("info", help="a classifier's inputs and its training report")
    info.add_argument("folder", type=Path)
    info.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.action == "info":
        try:
            spec = load_classifier(args.folder).spec
        except FileNotFoundError as exc:
            ap.error(str(exc))
        report = read_report(args.folder)
        if args.json:
            print(json.dumps({"cameras": list(spec.cameras), "image_shape": list(spec.image_shape),
                              "state_dim": spec.state_dim,
                              "state_names": list(spec.state_names), "threshold": spec.threshold, "report": report}))
        else:
            print(f"cameras {list(spec.cameras)} {list(spec.image_shape)}, "
                  f"state {list(spec.state_names) or spec.state_dim or 'not used'}, "
                  f"threshold {spec.threshold}; trained on {report.get('dataset')}")
            _print_scores(report)
        return 0
    try:
        if args.use_state and args.state:
            raise ValueError("give --use-state (all of observation.state) or --state PATTERNS, not both")
        state = ("*",) if args.use_state else tuple(p for p in args.state.split(",") if p)
        config = TrainConfig(cameras=tuple(c for c in args.cameras.split(",") if c), state=state,
                             epochs=args.epochs, holdout=args.holdout, threshold=args.threshold,
                             min_recall=args.min_recall, seed=args.seed, encoder=args.encoder, shift=args.shift)
        report = train_and_save(args.dataset, args.out, config)
    except (ValueError, FileExistsError, FileNotFoundError) as exc:
        ap.error(str(exc))
    _print_scores(report)
    print(f"saved to {args.out} (model.safetensors + classifier.json); use it with task.reward=classifier "
          f"task.classifier={args.out}")
    return 0
