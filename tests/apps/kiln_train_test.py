#!/usr/bin/env python3
"""kiln-train driven as a newcomer drove it: hostile checkpoint directories, impossible sizes,
files left by killed runs, altered checkpoints, mismatched data and bad flags. Each case is one
that kiln-train got wrong once (shell injection, SIGABRT, silent resumes, unreadable messages).
And kiln-checkpoint, which shows what such a checkpoint holds.

    kiln_train_test.py --train build/apps/kiln-train --checkpoint build/apps/kiln-checkpoint \
        --make-imagefolder build/apps/kiln-make-imagefolder

Programs run from an argument vector (subprocess without a shell), in a fresh temporary folder.
"""
import argparse
import gzip
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import unittest

TRAIN = None
CHECKPOINT = None
MAKE_IMAGEFOLDER = None
# Small and fast: 2 batches of 64 synthetic 28x28 images per epoch.
QUICK = ["--dataset", "synthetic", "--synthetic-size", "128", "--batch-size", "64",
         "--workers", "1", "--threads", "2"]


def run(*args, cwd=None):
    """kiln-train's exit status, stdout and stderr."""
    p = subprocess.run([TRAIN, *args], cwd=cwd, capture_output=True, text=True, timeout=300)
    return p.returncode, p.stdout, p.stderr


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + n]), raw[8 + n:]


def write_safetensors(path, header, data):
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data)


def write_idx(path, code, dims, payload):
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">I", code) + b"".join(struct.pack(">I", d) for d in dims) + payload)


class KilnTrainTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kiln_train_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def assert_one_line_error(self, rc, err, *needles):
        """Exit 1 with one line 'kiln-train: ...' naming each needle: no abort, no trace."""
        self.assertEqual(rc, 1, err)
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("kiln-train: "), err)
        self.assertNotIn("kiln-train: kiln-train:", err)
        self.assertNotIn("terminate called", err)
        for needle in needles:
            self.assertIn(needle, lines[0])

    def train_once(self, directory, *extra):
        rc, out, err = run(*QUICK, "--epochs", "1", "--checkpoint-dir", directory, *extra)
        self.assertEqual(rc, 0, out + err)
        return out

    # ---- security and crashes ----

    def test_checkpoint_dir_is_never_run_as_a_command(self):
        marker = os.path.join(self.tmp, "pwned")
        for name in ["x/$(touch %s)" % marker, "it's `touch %s`" % marker, 'a "quoted" dir']:
            directory = os.path.join(self.tmp, name)
            out = self.train_once(directory)
            self.assertFalse(os.path.exists(marker), "the directory name ran as a command")
            if shutil.which("gnuplot"):
                self.assertTrue(os.path.exists(os.path.join(directory, "curves.png")), out)
                self.assertIn("curves: ", out)

    def test_checkpoint_dir_that_is_a_file_is_one_clear_error(self):
        path = os.path.join(self.tmp, "a-file")
        open(path, "w").close()
        rc, _, err = run(*QUICK, "--epochs", "1", "--checkpoint-dir", path)
        self.assert_one_line_error(rc, err, "--checkpoint-dir", path, "Not a directory")

    def test_checkpoint_dir_under_proc_is_one_clear_error(self):
        rc, _, err = run(*QUICK, "--epochs", "1", "--checkpoint-dir", "/proc/kiln/run")
        self.assert_one_line_error(rc, err, "--checkpoint-dir /proc/kiln/run")

    def test_impossible_synthetic_size_is_refused_by_the_flag(self):
        rc, _, err = run("--dataset", "synthetic", "--synthetic-size", "4611686018427387904")
        self.assertNotEqual(rc, 0)
        self.assertIn("--synthetic-size: must be from 1 to 1000000000", err)
        self.assertNotIn("terminate called", err)

    # ---- losing nothing, accepting nothing broken ----

    def test_temporaries_of_a_killed_save_are_removed_on_the_next_start(self):
        directory = os.path.join(self.tmp, "run")
        os.makedirs(directory)
        stale = os.path.join(directory, "last.safetensors.tmp.2147483646")  # no such process
        with open(stale, "wb") as f:
            f.write(b"half a checkpoint")
        rc, out, err = run(*QUICK, "--epochs", "1", "--max-batches", "1", "--interrupt-after",
                           "1", "--checkpoint-dir", directory)
        self.assertEqual(rc, 130, out + err)
        self.assertFalse(os.path.exists(stale))

    def test_a_kill_between_metrics_row_and_checkpoint_keeps_every_row_once(self):
        directory = os.path.join(self.tmp, "run")
        self.train_once(directory)
        csv = os.path.join(directory, "metrics.csv")
        # What a kill leaves after epoch 2's row is written and before its checkpoint is.
        with open(csv, "a") as f:
            f.write("2,9.9,0.1,9.9,0.1,0.1,1.0,1.0\n")
        rc, out, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", directory, "--resume",
                           "last")
        self.assertEqual(rc, 0, out + err)
        with open(csv) as f:
            rows = [line.split(",") for line in f.read().splitlines()[1:]]
        self.assertEqual([row[0] for row in rows], ["1", "2"])
        # The injected row's losses are gone (compared field by field: a rate such as 339.9
        # images/s holds "9.9" too).
        self.assertNotIn("9.9", [rows[1][1], rows[1][3]])

    def test_a_metrics_file_from_before_the_top5_column_gets_it(self):
        directory = os.path.join(self.tmp, "run")
        self.train_once(directory)
        csv = os.path.join(directory, "metrics.csv")
        with open(csv) as f:
            header, row = f.read().splitlines()
        self.assertTrue(header.endswith(",seconds,test_top5_accuracy"), header)
        self.assertTrue(row.endswith(","), row)  # synthetic images: no top-5
        with open(csv, "w") as f:  # as kiln-train wrote it until 2026-11-28
            f.write(header.rsplit(",", 1)[0] + "\n" + row[:-1] + "\n")
        rc, out, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", directory, "--resume",
                           "last")
        self.assertEqual(rc, 0, out + err)
        with open(csv) as f:
            lines = f.read().splitlines()
        self.assertEqual(lines[0], header)
        self.assertEqual([len(line.split(",")) for line in lines], [9, 9, 9])

    def altered_checkpoint(self, alter):
        """A run stopped after its first batch (as by Ctrl-C), its checkpoint then altered."""
        directory = os.path.join(self.tmp, "run")
        rc, out, err = run(*QUICK, "--epochs", "2", "--interrupt-after", "1", "--checkpoint-dir",
                           directory)
        self.assertEqual(rc, 130, out + err)
        path = os.path.join(directory, "last.safetensors")
        header, data = read_safetensors(path)
        alter(header)
        write_safetensors(path, header, data)
        return directory

    def test_resume_refuses_a_tensor_relabelled_to_another_dtype(self):
        def relabel(header):
            header["model.conv1.weight"]["dtype"] = "I32"  # same bytes, other meaning
        directory = self.altered_checkpoint(relabel)
        rc, _, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", directory, "--resume", "last")
        self.assert_one_line_error(rc, err, "model.conv1.weight: checkpoint i32",
                                   "model f32")

    def test_resume_refuses_a_batch_beyond_the_epoch(self):
        def beyond(header):
            header["__metadata__"]["batch_in_epoch"] = "99999"
        directory = self.altered_checkpoint(beyond)
        rc, _, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", directory, "--resume", "last")
        self.assert_one_line_error(rc, err, "batch_in_epoch is 99999, beyond the 2 batches")

    def test_resume_refuses_a_global_step_off_the_position(self):
        def huge(header):
            header["__metadata__"]["global_step"] = "9223372036854775000"
        directory = self.altered_checkpoint(huge)
        rc, _, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", directory, "--resume", "last")
        self.assert_one_line_error(rc, err, "global_step is 9223372036854775000")

    def test_resume_refuses_a_schedule_step_past_the_run(self):
        def ahead(header):
            header["__metadata__"]["scheduler.last_epoch"] = "1000"
        directory = self.altered_checkpoint(ahead)
        rc, _, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", directory, "--resume", "last")
        self.assert_one_line_error(rc, err, "1000")

    def test_test_images_of_another_size_are_refused(self):
        data = os.path.join(self.tmp, "data")
        os.makedirs(data)
        for prefix, height in (("train", 28), ("t10k", 27)):
            write_idx(os.path.join(data, prefix + "-images-idx3-ubyte.gz"), 0x803,
                      [4, height, 28], bytes(4 * height * 28))
            write_idx(os.path.join(data, prefix + "-labels-idx1-ubyte.gz"), 0x801, [4],
                      bytes([0, 1, 2, 3]))
        rc, _, err = run("--dataset", "fashion-mnist", "--data-dir", data, "--batch-size", "2",
                         "--epochs", "1", "--workers", "1")
        self.assert_one_line_error(rc, err, "test images are [1, 27, 28]",
                                   "training images [1, 28, 28]")

    # ---- the newcomer's path ----

    def test_one_batch_per_epoch_trains(self):
        rc, out, err = run("--dataset", "synthetic", "--synthetic-size", "64", "--batch-size", "64",
                           "--epochs", "1", "--workers", "1")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("constant lr", out)
        self.assertRegex(out, r"test accuracy: [0-9.]+%")

    def test_range_errors_name_the_bound_readably(self):
        for flag, value, message in (("--epochs", "-1", "--epochs: must be at least 1, got -1"),
                                     ("--batch-size", "0", "--batch-size: must be at least 1"),
                                     ("--threads=-3", None, "--threads: must be from 0 to 4096"),
                                     ("--label-smoothing", "2", "--label-smoothing: must be from")):
            rc, _, err = run(flag, value) if value is not None else run(flag)
            self.assertNotEqual(rc, 0, flag)
            self.assertIn(message, err)
            self.assertIsNone(re.search(r"[0-9]{30}", err), err)

    def test_help_shows_no_cli11_internals(self):
        rc, out, _ = run("--help")
        self.assertEqual(rc, 0)
        self.assertNotIn("{false}", out)
        self.assertIn("--no-nesterov", out)

    def test_errors_carry_the_program_name_once(self):
        rc, _, err = run("--dataset", "cifar10")
        self.assert_one_line_error(rc, err, "--data-dir is required for cifar10")
        # A choice that is not one is a usage error (exit 2, as the guide says), named once too.
        rc, _, err = run("--dataset", "imagenet")
        self.assertEqual(rc, 2, err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertTrue(err.startswith("kiln-train: --dataset: imagenet not in {"), err)

    def test_piped_output_keeps_its_order(self):
        p = subprocess.run([TRAIN, *QUICK, "--epochs", "1"], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout)
        lines = p.stdout.splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("kiln-train: resnet20"))
        first_progress = next(i for i, line in enumerate(lines) if line.startswith("epoch 1/1 ["))
        self.assertLess(header, first_progress, p.stdout)

    def test_curves_of_one_epoch_have_an_axis_around_it(self):
        directory = os.path.join(self.tmp, "run")
        self.train_once(directory)
        if not shutil.which("gnuplot"):
            self.skipTest("gnuplot is not installed")
        with open(os.path.join(directory, "curves.gp")) as f:
            self.assertIn("set xrange [0.5:1.5]", f.read())

    def test_auto_device_is_the_best_present(self):
        rc, out, err = run(*QUICK, "--epochs", "1", "--max-batches", "1")
        self.assertEqual(rc, 0, out + err)
        if shutil.which("nvidia-smi") is None:
            self.assertIn("device cpu", out)
        else:  # a GPU may be visible: kiln takes it when it was built with CUDA
            self.assertRegex(out, r"device (cpu|cuda:0)")


    def test_cuda_graph_needs_a_gpu_and_says_what_it_cannot_capture(self):
        rc, out, err = run(*QUICK, "--epochs", "1", "--device", "cpu", "--cuda-graph")
        self.assert_one_line_error(rc, err, "--cuda-graph", "needs a GPU", "the device is cpu")
        rc, out, err = run(*QUICK, "--epochs", "1", "--device", "cpu", "--cuda-graph",
                           "--cuda-graph-warmup", "0")
        self.assertEqual(rc, 2, err)
        self.assertIn("--cuda-graph-warmup", err)

    # ---- mixed precision ----

    def test_amp_fp16_keeps_f32_weights_and_saves_the_scaler(self):
        out = self.train_once(self.tmp, "--amp", "fp16")
        self.assertIn("amp fp16", out)
        header, _ = read_safetensors(os.path.join(self.tmp, "last.safetensors"))
        for key in ("scale", "growth_factor", "backoff_factor", "growth_interval",
                    "_growth_tracker"):
            self.assertIn("scaler." + key, header)
        self.assertEqual(header["model.conv1.weight"]["dtype"], "F32")
        model, _ = read_safetensors(os.path.join(self.tmp, "model.safetensors"))
        self.assertEqual(model["conv1.weight"]["dtype"], "F32")

    def test_amp_bf16_needs_no_scaler(self):
        out = self.train_once(self.tmp, "--amp", "bf16")
        self.assertIn("amp bf16", out)
        header, _ = read_safetensors(os.path.join(self.tmp, "last.safetensors"))
        self.assertFalse([k for k in header if k.startswith("scaler.")])

    def test_resuming_an_f32_run_with_fp16_says_what_is_missing(self):
        self.train_once(self.tmp)
        rc, _, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", self.tmp, "--resume", "last",
                         "--amp", "fp16")
        self.assert_one_line_error(rc, err, "last.safetensors", "--amp was off", "is fp16 now",
                                   "resume with --amp off")

    # ---- profiling ----

    def test_profile_steps_writes_the_table_and_a_chrome_trace(self):
        out = self.train_once(self.tmp, "--profile-steps", "1", "--profile-warmup", "1")
        self.assertIn("profile of 1 training steps (after 1 of warm-up)", out)
        self.assertRegex(out, r"\nconv2d +op +\d+ ")
        with open(os.path.join(self.tmp, "profile.txt")) as f:
            table = f.read()
        self.assertIn("by input shape:", table)
        with open(os.path.join(self.tmp, "trace.json")) as f:
            trace = json.load(f)
        names = {e["name"] for e in trace["traceEvents"] if e.get("ph") == "X"}
        for name in ("forward", "backward", "optimizer", "conv2d", "Conv2dBackward"):
            self.assertIn(name, names)

    def test_profile_longer_than_the_run_reports_what_it_saw(self):
        rc, out, err = run(*QUICK, "--epochs", "1", "--profile-steps", "50", "--profile-warmup",
                           "0")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("profile of 2 training steps (after 0 of warm-up; 50 were asked for, but the "
                      "epoch ended first)", out)
        self.assertIn("no --checkpoint-dir: profile.txt and trace.json not written", out)

    def test_profile_after_the_run_says_so(self):
        rc, out, err = run(*QUICK, "--epochs", "1", "--profile-steps", "1")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("--profile-steps: the run ended after 2 steps, before the 2 of warm-up "
                      "were done; nothing was profiled", out)

    def test_profile_holds_training_steps_only(self):
        # 2 batches an epoch: after 1 of warm-up, one step is left before the evaluation.
        directory = os.path.join(self.tmp, "run")
        rc, out, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", directory,
                           "--profile-steps", "3", "--profile-warmup", "1")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("profile of 1 training steps (after 1 of warm-up; 3 were asked for, but the "
                      "epoch ended first)", out)
        with open(os.path.join(directory, "trace.json")) as f:
            trace = json.load(f)
        forwards = [e for e in trace["traceEvents"] if e.get("ph") == "X" and e["name"] == "forward"]
        self.assertEqual(len(forwards), 1)
        self.assertFalse([e for e in trace["traceEvents"] if e.get("name") == "evaluate"])

    def test_amp_flag_lists_its_choices(self):
        rc, _, err = run(*QUICK, "--amp", "fp32")
        self.assertEqual(rc, 2)
        self.assertIn("--amp: fp32 not in {off,fp16,bf16}", err)

    # ---- usage errors ----

    def test_a_flag_given_twice_says_so_with_status_2(self):
        rc, out, err = run(*QUICK, "--epochs", "1", "--epochs", "3")
        self.assertEqual(rc, 2, out + err)
        self.assertEqual(err.strip(),
                         "kiln-train: --epochs was given 2 times; give it once (see kiln-train --help)")

    def test_an_unknown_flag_is_a_usage_error_with_status_2(self):
        rc, _, err = run("--epoch", "1")
        self.assertEqual(rc, 2)
        self.assertTrue(err.startswith("kiln-train: "), err)
        self.assertIn("--epoch", err)
        self.assertIn("kiln-train --help", err)

    # ---- resuming with another recipe ----

    def test_resume_refuses_another_batch_size_naming_both(self):
        self.train_once(self.tmp)
        other_batch = [a if a != "64" else "32" for a in QUICK]
        rc, _, err = run(*other_batch, "--epochs", "2", "--checkpoint-dir", self.tmp, "--resume",
                         "last")
        self.assert_one_line_error(rc, err, "--batch-size was 64 when the checkpoint was saved and "
                                   "is 32 now", "resume with --batch-size 64")

    def test_resume_refuses_another_amp_mode(self):
        self.train_once(self.tmp, "--amp", "fp16")
        rc, _, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", self.tmp, "--resume", "last",
                         "--amp", "bf16")
        self.assert_one_line_error(rc, err, "--amp was fp16", "is bf16 now")

    def test_resume_with_more_epochs_and_another_lr_says_so(self):
        self.train_once(self.tmp)
        header, _ = read_safetensors(os.path.join(self.tmp, "last.safetensors"))
        self.assertEqual(header["__metadata__"]["recipe.batch_size"], "64")
        rc, out, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", self.tmp, "--resume", "last",
                           "--lr", "0.05")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("--epochs was 1, now 2", out)
        self.assertIn("--lr was 0.2, now 0.05", out)
        self.assertIn("resumed from", out)

    def resumed_epoch_losses(self, name, *changes):
        """Epoch 2's train and test losses of a run resumed after epoch 1 with `changes`."""
        directory = os.path.join(self.tmp, name)
        self.train_once(directory, "--schedule", "none")
        rc, out, err = run(*QUICK, "--epochs", "2", "--schedule", "none", "--checkpoint-dir",
                           directory, "--resume", "last", *changes)
        self.assertEqual(rc, 0, out + err)
        with open(os.path.join(directory, "metrics.csv")) as f:
            row = f.read().splitlines()[2].split(",")
        return out, (row[1], row[3])

    def test_a_resume_applies_each_change_it_prints(self):
        # Until 2026-11-28 the optimizer's load_state_dict put the checkpoint's values back after
        # the line was printed: the losses were those of an unchanged resume.
        _, unchanged = self.resumed_epoch_losses("unchanged")
        for name, change, line in [
                ("wd", ["--weight-decay", "0.5"], "--weight-decay was 0.0005, now 0.5"),
                ("momentum", ["--momentum", "0.5"], "--momentum was 0.9, now 0.5"),
                ("lr", ["--lr", "0.01"], "--lr was 0.2, now 0.01"),
                ("nesterov", ["--no-nesterov"], "--nesterov was true, now false")]:
            out, changed = self.resumed_epoch_losses(name, *change)
            self.assertIn(line, out)
            self.assertNotEqual(changed, unchanged, change)

    def image_folder(self):
        """A folder of PNGs, two a class in each split, from the synthetic set."""
        data = os.path.join(self.tmp, "images")
        p = subprocess.run([MAKE_IMAGEFOLDER, "--dataset", "synthetic", "--synthetic-size", "400",
                            "--per-class", "2", "--out", data], capture_output=True, text=True,
                           timeout=120)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return data

    def test_the_stem_follows_the_image_size(self):
        # Until 2026-11-28 image folders trained at 224 pixels on the 3x3/1 stem made for 28.
        data = self.image_folder()
        folder = ["--dataset", "imagefolder", "--data-dir", data, "--batch-size", "8",
                  "--workers", "1", "--threads", "2", "--epochs", "1", "--max-batches", "1"]
        rc, out, err = run(*folder, "--image-size", "72", "--checkpoint-dir", self.tmp)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("the ImageNet (7x7/2 and max-pool) stem", out)
        header, _ = read_safetensors(os.path.join(self.tmp, "last.safetensors"))
        self.assertEqual(header["__metadata__"]["recipe.large_input_stem"], "true")
        rc, out, err = run(*folder, "--image-size", "72", "--stem", "small")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("the small (3x3/1) stem", out)
        self.assertIn("warning: --stem small on 72-pixel images", err)
        rc, out, err = run(*folder, "--image-size", "32")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("the small (3x3/1) stem", out)
        self.assertNotIn("warning", err)
        rc, out, err = run(*QUICK, "--epochs", "1", "--large-input-stem")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("the ImageNet (7x7/2 and max-pool) stem", out)

    def test_a_vision_transformer_trains_resumes_and_mixes_precision(self):
        vit = [*QUICK, "--model", "vit-mini", "--optimizer", "adamw", "--lr", "1e-3"]
        rc, out, err = run(*vit, "--epochs", "1", "--checkpoint-dir", self.tmp)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("a vision transformer on patches of the images", out)
        header, _ = read_safetensors(os.path.join(self.tmp, "last.safetensors"))
        self.assertEqual(header["__metadata__"]["recipe.model"], "vit-mini")
        rc, out, err = run(*vit, "--epochs", "2", "--checkpoint-dir", self.tmp, "--resume", "last")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("resumed from", out)
        rc, out, err = run(*vit, "--epochs", "1", "--amp", "bf16")
        self.assertEqual(rc, 0, out + err)
        rc, out, err = run(*vit, "--epochs", "1", "--stem", "small")
        self.assertNotEqual(rc, 0)
        self.assertIn("--stem is a ResNet's; --model vit-mini cuts the images into patches", err)

    def test_small_class_counts_are_told_not_hidden(self):
        data = self.image_folder()
        folder = ["--dataset", "imagefolder", "--data-dir", data, "--image-size", "16",
                  "--batch-size", "8", "--workers", "1", "--threads", "2", "--epochs", "1"]
        classes = sorted(os.listdir(os.path.join(data, "train")))
        for split in ("train", "val"):
            for name in classes[4:]:
                shutil.rmtree(os.path.join(data, split, name))
        rc, out, err = run(*folder)  # four classes: every label is in the top 5
        self.assertEqual(rc, 0, out + err)
        self.assertNotIn("top-5", out)
        for split in ("train", "val"):
            for name in classes[1:4]:
                shutil.rmtree(os.path.join(data, split, name))
        rc, out, err = run(*folder)
        self.assertEqual(rc, 0, out + err)
        self.assertIn("holds one class folder (" + classes[0] + ")", err)

    def test_a_bad_file_mid_epoch_keeps_the_epoch_and_can_be_skipped(self):
        # Until 2026-11-28 such a file ended the run with the partial epoch lost and no way on.
        data = self.image_folder()
        label = sorted(os.listdir(os.path.join(data, "train")))[3]
        bad = os.path.join(data, "train", label,
                           sorted(os.listdir(os.path.join(data, "train", label)))[0])
        with open(bad, "r+b") as f:
            f.truncate(100)
        folder = ["--dataset", "imagefolder", "--data-dir", data, "--image-size", "16",
                  "--batch-size", "2", "--workers", "1", "--threads", "2", "--epochs", "1"]
        run_dir = os.path.join(self.tmp, "run")
        rc, out, err = run(*folder, "--checkpoint-dir", run_dir)
        last = os.path.join(run_dir, "last.safetensors")
        message = err.strip().splitlines()[-1]
        self.assertEqual(rc, 1, out + err)
        for needle in [bad, "truncated or corrupt PNG", "--resume last", "--skip-bad-files",
                       "batches of this epoch before it are saved in " + last]:
            self.assertIn(needle, message)
        done = int(message.split("the run stopped at epoch 1, batch ")[1].split(":")[0]) - 1
        self.assertGreater(done, 0)  # seed 0 puts the file past the first batch
        rc, out, err = run(*folder, "--checkpoint-dir", run_dir, "--resume", "last",
                           "--skip-bad-files")
        self.assertEqual(rc, 0, out + err)
        self.assertIn(f"resumed from {last} at epoch 1, batch {done}", out)
        self.assertIn("ImageFolder: skipping " + bad, err)
        with open(os.path.join(run_dir, "metrics.csv")) as f:
            top5 = f.read().splitlines()[1].split(",")[8]
        self.assertGreater(float(top5), 0.0)  # ten classes: the top-5 column is filled

    def test_bad_choices_are_usage_errors(self):
        for flag, value in [("--model", "resnet21"), ("--dataset", "imagenet"),
                            ("--device", "gpu"), ("--device", "cuda:x")]:
            rc, _, err = run(flag, value)
            self.assertEqual(rc, 2, err)
            self.assertIn(flag, err)

    def test_a_resume_on_an_image_folder_with_other_classes_is_refused(self):
        # Until 2026-11-28 a renamed class folder reordered the labels and the run went on.
        data = self.image_folder()
        folder = ["--dataset", "imagefolder", "--data-dir", data, "--image-size", "16",
                  "--batch-size", "8", "--workers", "1", "--threads", "2", "--epochs", "2"]
        run_dir = os.path.join(self.tmp, "run")
        rc, out, err = run(*folder, "--checkpoint-dir", run_dir, "--interrupt-after", "1")
        self.assertEqual(rc, 130, out + err)
        classes = sorted(os.listdir(os.path.join(data, "train")))
        for split in ("train", "val"):
            os.rename(os.path.join(data, split, classes[0]), os.path.join(data, split, "zz"))
        rc, _, err = run(*folder, "--checkpoint-dir", run_dir, "--resume", "last")
        renamed = classes[1:] + ["zz"]
        self.assert_one_line_error(rc, err, "the list of class folders (in label order) was [" +
                                   ",".join(classes) + "]", "is [" + ",".join(renamed) + "] now")
        # The same classes in a folder elsewhere: a printed line, and the run goes on.
        for split in ("train", "val"):
            os.rename(os.path.join(data, split, "zz"), os.path.join(data, split, classes[0]))
        moved = os.path.join(self.tmp, "moved")
        os.rename(data, moved)
        rc, out, err = run(*folder[:3], moved, *folder[4:], "--checkpoint-dir", run_dir,
                           "--resume", "last")
        self.assertEqual(rc, 0, out + err)
        self.assertIn("--data-dir was " + data + ", now " + moved, out)

    def test_a_diverging_run_stops_and_keeps_the_last_checkpoint(self):
        # Until 2026-11-28 such a run trained on as NaN, saved it, and exited 0.
        self.train_once(self.tmp, "--schedule", "none")
        path = os.path.join(self.tmp, "last.safetensors")
        with open(path, "rb") as f:
            saved = f.read()
        rc, _, err = run(*QUICK, "--epochs", "2", "--schedule", "none", "--lr", "1e300",
                         "--checkpoint-dir", self.tmp, "--resume", "last")
        # The epoch's progress bar, then one line.
        self.assertEqual(rc, 1, err)
        last = err.strip().splitlines()[-1]
        self.assertTrue(last.startswith("kiln-train: the training loss is NaN at epoch 2, batch"),
                        err)
        self.assertIn("training diverged and stopped; " + path + " is kept as it was saved", last)
        with open(path, "rb") as f:
            self.assertEqual(f.read(), saved)

    def test_a_checkpoint_holding_nan_weights_is_refused(self):
        self.train_once(self.tmp)
        path = os.path.join(self.tmp, "last.safetensors")
        header, data = read_safetensors(path)
        begin = header["model.conv1.weight"]["data_offsets"][0]
        data = data[:begin] + struct.pack("<f", float("nan")) + data[begin + 4:]
        write_safetensors(path, header, data)
        rc, _, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", self.tmp, "--resume", "last")
        self.assert_one_line_error(rc, err, "model.conv1.weight holds 1 NaN or infinite value",
                                   "diverged")

    def test_sigterm_saves_a_checkpoint_that_resumes(self):
        p = subprocess.Popen([TRAIN, *QUICK, "--epochs", "1000", "--checkpoint-dir", self.tmp],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in p.stdout:
            if "parameters" in line:
                break
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 143, out + err)
        self.assertIn("checkpoint saved to", out)
        rc, out, err = run(*QUICK, "--epochs", "1000", "--interrupt-after", "1",
                           "--checkpoint-dir", self.tmp, "--resume", "last")
        self.assertEqual(rc, 130, out + err)
        self.assertIn("resumed from", out)

    def test_one_synthetic_image_reports_numbers(self):
        rc, out, err = run("--dataset", "synthetic", "--synthetic-size", "1", "--batch-size", "1",
                           "--workers", "0", "--epochs", "1")
        self.assertEqual(rc, 0, out + err)
        self.assertNotIn("nan", out)

    def test_momentum_where_nothing_reads_it_is_refused(self):
        rc, _, err = run(*QUICK, "--epochs", "1", "--momentum", "0.5")
        self.assert_one_line_error(rc, err, "--momentum does nothing under --schedule onecycle",
                                   "--schedule cosine, step or none")
        rc, _, err = run(*QUICK, "--epochs", "1", "--optimizer", "adam", "--schedule", "none",
                         "--momentum", "0.5")
        self.assert_one_line_error(rc, err, "--momentum is SGD's")

    def test_fewer_epochs_than_the_checkpoint_has_done_are_refused_naming_them(self):
        rc, out, err = run(*QUICK, "--epochs", "2", "--checkpoint-dir", self.tmp)
        self.assertEqual(rc, 0, out + err)
        rc, _, err = run(*QUICK, "--epochs", "1", "--checkpoint-dir", self.tmp, "--resume", "last")
        self.assert_one_line_error(rc, err, "the checkpoint is at epoch 2, past this run's 1 epochs",
                                   "--epochs")
        self.assertNotIn("OneCycleLR", err)

    def test_rates_that_are_not_finite_are_refused_by_the_flag(self):
        for flag in ["--lr", "--momentum", "--weight-decay"]:
            for value in ["inf", "nan", "1e999", "-1"]:
                rc, _, err = run(*QUICK, "--epochs", "1", "--schedule", "none", flag, value)
                self.assertEqual(rc, 2, err)
                self.assertIn(flag, err)


class KilnCheckpointTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kiln_checkpoint_test_")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def show(self, path):
        p = subprocess.run([CHECKPOINT, "show", path], capture_output=True, text=True, timeout=60)
        return p.returncode, p.stdout, p.stderr

    def test_show_lists_metadata_and_every_tensor(self):
        rc, out, err = run(*QUICK, "--epochs", "1", "--checkpoint-dir", self.tmp)
        self.assertEqual(rc, 0, out + err)
        rc, out, err = self.show(os.path.join(self.tmp, "last.safetensors"))
        self.assertEqual(rc, 0, err)
        self.assertIn("format = kiln.training_checkpoint.v1", out)
        self.assertIn("epoch = 1", out)
        self.assertIn("optimizer = SGD", out)
        self.assertRegex(out, r"model\.conv1\.weight +f32 +\[16, 1, 3, 3\] +576")
        header, _ = read_safetensors(os.path.join(self.tmp, "last.safetensors"))
        tensors = [name for name in header if name != "__metadata__"]
        self.assertIn("%d tensors" % len(tensors), out)
        for name in tensors:
            self.assertIn(name, out)

    def test_show_of_a_broken_file_is_one_clear_error(self):
        path = os.path.join(self.tmp, "broken.safetensors")
        with open(path, "wb") as f:
            f.write(struct.pack("<Q", 12) + b'{"a": 1}')
        rc, _, err = self.show(path)
        self.assertEqual(rc, 1)
        self.assertEqual(len(err.strip().splitlines()), 1, err)
        self.assertTrue(err.startswith("kiln-checkpoint: load_safetensors: " + path), err)


def main():
    global TRAIN, CHECKPOINT, MAKE_IMAGEFOLDER
    parser = argparse.ArgumentParser()
    parser.add_argument("--train", required=True, help="the kiln-train executable")
    parser.add_argument("--checkpoint", required=True, help="the kiln-checkpoint executable")
    parser.add_argument("--make-imagefolder", required=True,
                        help="the kiln-make-imagefolder executable")
    args, rest = parser.parse_known_args()
    TRAIN = os.path.abspath(args.train)
    CHECKPOINT = os.path.abspath(args.checkpoint)
    MAKE_IMAGEFOLDER = os.path.abspath(args.make_imagefolder)
    unittest.main(argv=[sys.argv[0], *rest], verbosity=2)


if __name__ == "__main__":
    main()
