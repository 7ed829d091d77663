"""A real PyTorch training job with an OpenCV input pipeline, for tprof's
tests and `cargo xtask bench real`.

A small CNN trains on JPEGs that a Dataset decodes with OpenCV (imread,
resize, Gaussian blur) and converts with torch, through a DataLoader with
the given num_workers, pin_memory, persistent_workers and batch size.
Thread pools are left to the environment (OMP_NUM_THREADS,
MKL_NUM_THREADS), as in a user's job. The images are generated on the
first run into --data-dir and reused while their parameters match (the
tests and the bench keep them in /dev/shm, so no run waits for a disk the
machine's other work keeps busy).

The job prints its own ground truth as JSON lines on stdout (and appends
them to $TPROF_TRUTH_FILE when set, since `tprof record --` mixes the
job's stdout with its report):

  {"event": "config", ...}          settings, versions, pid, usable cores
  {"event": "epoch", ...}           a new DataLoader iterator: its worker
                                    pids and pin-memory thread (new ones
                                    each epoch without persistent_workers)
  {"event": "worker_start", ...}    from worker_init_fn, per worker and
                                    epoch: id (get_worker_info), pid, ppid
  {"event": "worker_threads", ...}  a worker's threads (tid, name,
                                    schedstat, started by Python or by a
                                    native library) whenever the set changes
  {"event": "ready", ...}           warm-up done, workers alive (their pids)
  {"event": "iteration", ...}       with --progress, each timed iteration
                                    as it ends (start, batch, end), for a
                                    test that stops the job when done
  {"event": "summary", ...}         every timed iteration's start, batch
                                    arrival and end (time.monotonic_ns,
                                    CLOCK_MONOTONIC as the kernel's
                                    timestamps), the warm-up iterations'
                                    likewise, throughput, the main
                                    process's threads and the pin thread

The first epoch's DataLoader iterator (its workers) is made before the
first iteration: worker start is startup, as tprof's steps count it.

With --go-file PATH the job stops after warm-up (workers alive, ready
printed) until PATH exists: a test attaches `tprof record -p` and then
lets the timed iterations begin.

pin_memory on a machine without an accelerator: torch then turns pinning
off and starts no pin-memory thread. So that such a machine runs the
thread structure a GPU machine does, the job keeps torch's own pin-memory
thread (`_pin_memory_loop`, named pt_data_pin) and has it copy each batch
into fresh memory in place of page-locked memory ("pin_memory_thread":
"stand-in" in the ground truth; "real" with an accelerator).
"""

import argparse
import functools
import json
import mmap
import os
import random
import shutil
import sys
import tempfile
import threading
import time

import cv2
import numpy as np
import torch
import torch.nn as nn
import torch.utils.data
import torch.utils.data._utils.pin_memory as torch_pin_memory

TRUTH_FILE = os.environ.get("TPROF_TRUTH_FILE")
GO_FILE_TIMEOUT_S = 120.0


def emit(record):
    """One ground-truth line, in one write so workers' lines never interleave."""
    line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
    os.write(sys.stdout.fileno(), line)
    if TRUTH_FILE:
        fd = os.open(TRUTH_FILE, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-dir", required=True, help="where the JPEGs are (made when missing)")
    p.add_argument("--images", type=int, default=600)
    p.add_argument("--source-size", type=int, nargs=2, default=[480, 360], metavar=("W", "H"))
    p.add_argument("--image-size", type=int, default=64, help="side after resize")
    p.add_argument("--blur", type=int, default=9, help="Gaussian kernel size (odd)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--num-workers", type=int, default=2)
    p.add_argument("--pin-memory", action="store_true")
    p.add_argument("--persistent-workers", action="store_true")
    p.add_argument("--prefetch-factor", type=int, default=None)
    p.add_argument("--warmup", type=int, default=2, help="iterations before the timed ones")
    p.add_argument("--iterations", type=int, default=40, help="timed iterations")
    p.add_argument("--go-file", help="after warm-up, wait until this file exists")
    p.add_argument("--progress", action="store_true", help="emit each timed iteration as it ends")
    p.add_argument("--generate-only", action="store_true", help="make the images and exit")
    # The zoo of input-pipeline pathologies (`cargo xtask bench zoo`): each
    # option below makes one of them, alone or together.
    p.add_argument(
        "--dataset",
        choices=["jpeg", "python", "bursty", "remote", "large", "disk"],
        default="jpeg",
        help="jpeg: decode with OpenCV; python: parse records in pure Python (holds the GIL); "
        "bursty: every --burst-every'th batch waits for remote storage (in order, no shuffle); "
        "remote: every item waits --fetch-ms for remote storage; "
        "large: images sent at full resolution as --dtype, resized by the trainer; "
        "disk: small random O_DIRECT reads of --disk-file",
    )
    p.add_argument("--item-work", type=int, default=6000, help="python: tokens parsed per item")
    p.add_argument("--burst-ms", type=float, default=240.0,
                   help="bursty: how long a costly batch waits for its items (fetched from remote storage)")
    p.add_argument("--fetch-ms", type=float, default=1.5,
                   help="remote: how long each item waits for remote storage")
    p.add_argument("--burst-every", type=int, default=8,
                   help="bursty: one batch in this many is costly; an even one with 2 workers gives "
                   "every costly batch to the same worker")
    p.add_argument("--collate", choices=["default", "numpy"], default="default",
                   help="numpy: a collate_fn that returns numpy arrays, which go through the pipe pickled "
                   "(default_collate's tensors go through shared memory)")
    p.add_argument("--dtype", choices=["float32", "float64", "uint8"], default="float32",
                   help="what a batch holds when the workers send it (uint8: the trainer converts)")
    p.add_argument("--disk-file", default="/var/tmp/tprof-zoo-records.bin",
                   help="disk: the file read with O_DIRECT (made when missing; not on tmpfs)")
    p.add_argument("--disk-reads", type=int, default=48, help="disk: random 4 KiB reads per item")
    p.add_argument("--epoch-batches", type=int, default=None, help="batches per epoch (short epochs)")
    p.add_argument("--worker-init-ms", type=float, default=0.0,
                   help="worker_init_fn also opens an index for this long (waiting, as on a remote store)")
    p.add_argument("--mp-context", choices=["fork", "spawn", "forkserver"], default=None)
    p.add_argument("--dataset-payload-mb", type=int, default=0,
                   help="an index the dataset carries, pickled into every worker under spawn")
    p.add_argument("--model", choices=["small", "large"], default="small")
    p.add_argument("--metrics-thread", action="store_true",
                   help="a Python thread in the trainer that computes metrics in pure Python")
    return p.parse_args()


# ---- the dataset -----------------------------------------------------------


def has_images(data_dir, stamp):
    try:
        with open(os.path.join(data_dir, "stamp.json")) as f:
            return json.load(f) == stamp
    except (OSError, ValueError):
        return False


def generate_images(args):
    """JPEGs with smooth shapes and some noise, so they decode like photos
    rather than flat colour. Reused while the stamp matches. Made in a
    directory of their own and renamed into place, so jobs started together
    never read another's half-written files."""
    stamp = {"images": args.images, "source_size": args.source_size, "version": 2}
    if has_images(args.data_dir, stamp):
        return
    parent = os.path.dirname(os.path.abspath(args.data_dir))
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".images-", dir=parent)
    try:
        write_images(args, staging)
        with open(os.path.join(staging, "stamp.json"), "w") as f:
            json.dump(stamp, f)
        if os.path.isdir(args.data_dir) and not has_images(args.data_dir, stamp):
            shutil.rmtree(args.data_dir, ignore_errors=True)
        try:
            os.rename(staging, args.data_dir)
        except OSError:
            if not has_images(args.data_dir, stamp):
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def write_images(args, out_dir):
    w, h = args.source_size
    rng = np.random.default_rng(12345)
    yy, xx = np.mgrid[0 : 2 * h, 0 : 2 * w].astype(np.float32)
    # A few large patterns and a bank of noise; each image is a random crop
    # of one plus a crop of the noise and a few rectangles (making each
    # image from scratch costs more than the whole job's decoding).
    patterns = [
        np.clip(
            np.stack(
                [
                    127 + 120 * np.sin(xx / rng.uniform(15, 60) + rng.uniform(0, 6)),
                    127 + 120 * np.cos(yy / rng.uniform(15, 60) + rng.uniform(0, 6)),
                    127 + 120 * np.sin((xx + yy) / rng.uniform(20, 80)),
                ],
                axis=-1,
            ),
            20,
            235,
        ).astype(np.uint8)
        for _ in range(6)
    ]
    noise = rng.integers(-20, 20, size=(2 * h, 2 * w, 3), dtype=np.int16)
    for i in range(args.images):
        x, y = int(rng.integers(0, w)), int(rng.integers(0, h))
        nx, ny = int(rng.integers(0, w)), int(rng.integers(0, h))
        img = patterns[i % len(patterns)][y : y + h, x : x + w].astype(np.int16)
        img = np.clip(img + noise[ny : ny + h, nx : nx + w], 0, 255).astype(np.uint8)
        for _ in range(4):
            x0, y0 = int(rng.integers(0, w - 40)), int(rng.integers(0, h - 40))
            color = tuple(int(c) for c in rng.integers(0, 255, size=3))
            cv2.rectangle(img, (x0, y0), (x0 + 40, y0 + 30), color, -1)
        cv2.imwrite(os.path.join(out_dir, f"{i:05d}.jpg"), img, [cv2.IMWRITE_JPEG_QUALITY, 90])


class JpegDataset(torch.utils.data.Dataset):
    """The job's dataset: JPEGs decoded with OpenCV, or one of the zoo's
    variants (--dataset). Each variant's costly work is a function of its
    own (parse_record, decode_costly, read_record), as in a user's code,
    so a profiler has a name to show."""

    def __init__(self, args):
        self.paths = [os.path.join(args.data_dir, f"{i:05d}.jpg") for i in range(args.images)]
        self.length = len(self.paths)
        if args.epoch_batches is not None:
            self.length = args.epoch_batches * args.batch_size
            if args.dataset not in ("bursty", "remote"):
                # The others read files: no more items than images.
                self.length = min(self.length, len(self.paths))
        self.kind = args.dataset
        self.size = args.image_size
        self.blur = args.blur
        self.dtype = args.dtype
        self.batch_size = args.batch_size
        self.item_work = args.item_work
        self.burst_ms = args.burst_ms
        self.burst_every = args.burst_every
        self.fetch_ms = args.fetch_ms
        self.disk_file = args.disk_file
        self.disk_reads = args.disk_reads
        self.disk = None  # (fd, buffer), opened in each process on first use
        # An index the dataset carries: pickled into every worker under
        # spawn or forkserver, shared copy-on-write under fork.
        self.payload = np.ones(args.dataset_payload_mb << 20, np.uint8) if args.dataset_payload_mb else None
        self.threads_seen = None
        self.threads_settled = False

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if self.kind == "python":
            img = parse_record(index, self.item_work, self.size)
        elif self.kind == "disk":
            img = self.read_record(index)
        else:
            if self.kind == "bursty":
                # Items from a local cache, cheap, but every Nth batch's
                # from remote storage.
                if (index // self.batch_size) % self.burst_every == self.burst_every - 1:
                    fetch_remote(self.burst_ms / self.batch_size)
                return to_tensor(cached_item(index, self.size), self.dtype), index % 10
            if self.kind == "remote":
                # Every item from remote storage (an object store, a
                # network filesystem): each waits, none computes much.
                fetch_remote(self.fetch_ms)
                return to_tensor(cached_item(index, self.size), self.dtype), index % 10
            img = cv2.imread(self.paths[index], cv2.IMREAD_COLOR)
            if self.kind == "large":
                # Sent at full resolution; the trainer resizes.
                return to_tensor(img, self.dtype), index % 10
            img = cv2.resize(img, (self.size, self.size), interpolation=cv2.INTER_AREA)
            img = cv2.GaussianBlur(img, (self.blur, self.blur), 0)
        tensor = to_tensor(img, self.dtype)
        report_worker_threads(self)
        return tensor, index % 10

    def read_record(self, index):
        """A record stored as small blocks scattered over a file (an index
        lookup, then the pieces), read with O_DIRECT so that every read
        reaches the disk, as on a dataset far larger than the page cache."""
        if self.disk is None:
            fd = os.open(self.disk_file, os.O_RDONLY | os.O_DIRECT)
            self.disk = (fd, mmap.mmap(-1, DISK_BLOCK), os.fstat(fd).st_size // DISK_BLOCK)
        fd, block, blocks = self.disk
        rng = random.Random(index)
        pieces = []
        for _ in range(self.disk_reads):
            os.preadv(fd, [block], rng.randrange(blocks) * DISK_BLOCK)
            pieces.append(bytes(block[:256]))
        raw = np.frombuffer(b"".join(pieces), np.uint8)
        need = self.size * self.size * 3
        return np.resize(raw, need).reshape(self.size, self.size, 3)


DISK_BLOCK = 4096


def make_disk_file(path, mib=256):
    """The disk dataset's file, made once (random bytes, so nothing
    compresses or dedups it); kept off tmpfs so O_DIRECT reads hit a disk."""
    if os.path.exists(path) and os.path.getsize(path) == mib << 20:
        return
    staging = f"{path}.{os.getpid()}.tmp"
    with open(staging, "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
    os.rename(staging, path)


def parse_record(index, work, size):
    """A record parsed in pure Python (a stand-in for text, JSON or
    annotation parsing): tokens hashed into a feature grid. It holds the
    GIL throughout, so on the training thread nothing else of the
    trainer's Python runs meanwhile."""
    rng = random.Random(index)
    grid = [0] * (size * size)
    cells = len(grid)
    for _ in range(work):
        token = rng.getrandbits(24)
        grid[token % cells] += token & 7
    plane = np.asarray(grid, dtype=np.uint8).reshape(size, size)
    return np.repeat(plane[:, :, None], 3, axis=2)


def cached_item(index, size):
    """An item already decoded in a local cache: next to nothing to make."""
    return np.full((size, size, 3), index % 251, dtype=np.uint8)


def fetch_remote(ms):
    """An item not in the local cache, fetched from remote storage first:
    the bursty dataset's every --burst-every'th batch is made of them, and
    every item of the remote dataset. It waits rather than computes, so a
    deeper prefetch (bursts) or more workers (every item) hide it without
    more CPU."""
    time.sleep(ms / 1000.0)


def numpy_collate(batch):
    """A collate_fn that returns numpy arrays (as code written for another
    framework does): a worker pickles them whole into the pipe, where
    default_collate's tensors would travel through shared memory."""
    images = np.stack([np.asarray(img) for img, _ in batch])
    labels = np.asarray([label for _, label in batch])
    return images, labels


def to_tensor(img, dtype):
    """HWC uint8 to a CHW tensor of the type the batch is sent as: uint8
    leaves the conversion to the trainer (decode later)."""
    tensor = torch.from_numpy(img).permute(2, 0, 1)
    if dtype == "uint8":
        return tensor.contiguous()
    if dtype == "float64":
        return tensor.double().div_(255.0)
    return tensor.float().div_(255.0)


def thread_table():
    """This process's threads: tid, name, schedstat (on-CPU ns, run delay
    ns, timeslices) from /proc/self/task, and whether Python started it
    (threading knows it): a Python thread (a queue feeder, the pin-memory
    thread) or one a native library made (a pool thread)."""
    python_tids = {t.native_id for t in threading.enumerate()}
    rows = []
    for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().rstrip("\n")
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                on_cpu, delay, slices = (int(x) for x in f.read().split())
        except OSError:
            continue  # the thread exited between the listing and the read
        rows.append(
            {
                "tid": tid,
                "name": name,
                "python": tid in python_tids,
                "on_cpu_ns": on_cpu,
                "run_delay_ns": delay,
                "timeslices": slices,
            }
        )
    return rows


def report_worker_threads(dataset):
    """In a worker: emit its threads whenever the set changes (pool threads
    appear at the first parallel region, queue feeders at the first batch),
    so the ground truth has them even though a worker has no exit hook to
    report from. A Python thread is in /proc before threading lists it (the
    queue's feeder thread starts multiprocessing's resource sharer while
    this one decodes), so a new set is emitted once it held for a whole
    item with no Python thread still starting."""
    if torch.utils.data.get_worker_info() is None:
        return
    tids = frozenset(os.listdir("/proc/self/task"))
    if tids != dataset.threads_seen:
        dataset.threads_seen = tids
        dataset.threads_settled = False
        return
    if dataset.threads_settled or threading._limbo:
        return
    dataset.threads_settled = True
    emit({"event": "worker_threads", "pid": os.getpid(), "ts_ns": time.monotonic_ns(), "threads": thread_table()})


def worker_init(worker_id, init_ms=0.0):
    info = torch.utils.data.get_worker_info()
    start = time.monotonic_ns()
    if init_ms > 0:
        open_index(init_ms)
    emit(
        {
            "event": "worker_start",
            "id": info.id,
            "num_workers": info.num_workers,
            "pid": os.getpid(),
            "ppid": os.getppid(),
            "ts_ns": start,
            "init_end_ns": time.monotonic_ns(),
            "torch_threads": torch.get_num_threads(),
            "cv2_threads": cv2.getNumThreads(),
        }
    )


def open_index(ms):
    """What a worker_init_fn opens before the first item (an LMDB
    environment, a tokenizer, a remote index): here a wait of `ms`."""
    time.sleep(ms / 1000.0)


# ---- pin memory without an accelerator -----------------------------------


def stand_in_pin(data, device=None):
    """What pinning does to a batch, short of page-locking: a copy."""
    if isinstance(data, torch.Tensor):
        return data.clone()
    if isinstance(data, (list, tuple)):
        return type(data)(stand_in_pin(d) for d in data)
    return data


def keep_pin_thread_without_accelerator():
    """Lets torch's DataLoader start its real pin-memory thread on a machine
    without an accelerator (see the module's docstring)."""
    torch.accelerator.is_available = lambda: True
    torch.accelerator.current_accelerator = lambda *a, **k: None
    torch.accelerator.current_device_index = lambda: 0
    torch.accelerator.set_device_index = lambda *a, **k: None
    torch_pin_memory.pin_memory = stand_in_pin


# ---- the model -------------------------------------------------------------


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(16, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


class LargeCnn(SmallCnn):
    """A model whose compute outweighs its input pipeline (the zoo's
    healthy, compute-bound job)."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 48, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(48, 96, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(96, 96, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(96, 32, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )


def metrics_loop(stop):
    """Running statistics in pure Python, as a logging or metrics thread
    might keep them: it holds the GIL whenever it runs, so the training
    thread's Python waits for it."""
    window = []
    while not stop.is_set():
        window.append(sum(i * i for i in range(2000)) % 97)
        del window[:-100]


# ---- the training loop -----------------------------------------------------


class Batches:
    """Endless batches, epoch after epoch, keeping the current epoch's
    DataLoader iterator (its workers and pin-memory thread) in view."""

    def __init__(self, loader):
        self.loader = loader
        self.epoch = -1
        self.current = None

    def next(self):
        while True:
            if self.current is not None:
                try:
                    return self.epoch, next(self.current)
                except StopIteration:
                    pass
            self.epoch += 1
            self.current = iter(self.loader)
            self.announce()

    def announce(self):
        emit(
            {
                "event": "epoch",
                "epoch": self.epoch,
                "ts_ns": time.monotonic_ns(),
                "worker_pids": self.worker_pids(),
                "pin_memory_tid": self.pin_memory_tid(),
            }
        )

    def start(self):
        """Makes the first epoch's iterator, as the first next() would."""
        self.epoch = 0
        self.current = iter(self.loader)
        self.announce()

    def worker_pids(self):
        return [w.pid for w in getattr(self.current, "_workers", [])]

    def pin_memory_tid(self):
        pin = getattr(self.current, "_pin_memory_thread", None)
        return pin.native_id if pin is not None else None


def wait_for(path):
    deadline = time.monotonic() + GO_FILE_TIMEOUT_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            sys.exit(f"train_job: {path} did not appear within {GO_FILE_TIMEOUT_S:.0f} s")
        time.sleep(0.005)


def main():
    args = parse_args()
    generate_images(args)
    if args.dataset == "disk":
        make_disk_file(args.disk_file)
    if args.generate_only:
        return
    accelerator = torch.accelerator.is_available()
    device = torch.accelerator.current_accelerator() if accelerator else torch.device("cpu")
    pin_thread = "none"
    if args.pin_memory and args.num_workers > 0:
        pin_thread = "real" if accelerator else "stand-in"
        if not accelerator:
            keep_pin_thread_without_accelerator()
    emit(
        {
            "event": "config",
            "pid": os.getpid(),
            "num_workers": args.num_workers,
            "pin_memory": args.pin_memory,
            "pin_memory_thread": pin_thread,
            "persistent_workers": args.persistent_workers,
            "prefetch_factor": args.prefetch_factor,
            "batch_size": args.batch_size,
            "images": args.images,
            "image_size": args.image_size,
            "warmup": args.warmup,
            "iterations": args.iterations,
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "mkl_num_threads": os.environ.get("MKL_NUM_THREADS"),
            "torch_threads": torch.get_num_threads(),
            "cv2_threads": cv2.getNumThreads(),
            "usable_cores": len(os.sched_getaffinity(0)),
            "device": str(device),
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "opencv": cv2.__version__,
            "numpy": np.__version__,
            "dataset": args.dataset,
            "dtype": args.dtype,
            "epoch_batches": args.epoch_batches,
            "worker_init_ms": args.worker_init_ms,
            "mp_context": args.mp_context,
            "model": args.model,
            "metrics_thread": args.metrics_thread,
            "collate": args.collate,
        }
    )
    loader_args = {}
    if args.prefetch_factor is not None:
        loader_args["prefetch_factor"] = args.prefetch_factor
    if args.mp_context is not None and args.num_workers > 0:
        loader_args["multiprocessing_context"] = args.mp_context
    loader = torch.utils.data.DataLoader(
        JpegDataset(args),
        batch_size=args.batch_size,
        # The bursty dataset's costly batches come in order.
        shuffle=args.dataset != "bursty",
        num_workers=args.num_workers,
        pin_memory=args.pin_memory,
        persistent_workers=args.persistent_workers and args.num_workers > 0,
        worker_init_fn=functools.partial(worker_init, init_ms=args.worker_init_ms),
        collate_fn=numpy_collate if args.collate == "numpy" else None,
        drop_last=True,
        **loader_args,
    )
    model = (LargeCnn() if args.model == "large" else SmallCnn()).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    stream = Batches(loader)

    def train_step(images, labels):
        if isinstance(images, np.ndarray):
            images, labels = torch.from_numpy(images), torch.from_numpy(labels)
        if images.dtype != torch.float32:
            images = images.float()
            if args.dtype == "uint8":
                images.div_(255.0)
        if images.shape[-1] != args.image_size:
            images = nn.functional.interpolate(images, size=(args.image_size, args.image_size), mode="bilinear")
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    # The first epoch's iterator (its workers and pin-memory thread) is
    # made before the first iteration: starting workers is startup, as a
    # profiler's steps count it (tprof's first step is the first batch
    # asked for). Later epochs' iterators are made inside the iteration
    # that exhausts the previous one, as in any training loop.
    stop_metrics = threading.Event()
    if args.metrics_thread:
        threading.Thread(target=metrics_loop, args=(stop_metrics,), name="metrics", daemon=True).start()
    stream.start()
    warmup_iterations = []
    for i in range(args.warmup):
        start = time.monotonic_ns()
        epoch, (images, labels) = stream.next()
        batch = time.monotonic_ns()
        train_step(images, labels)
        end = time.monotonic_ns()
        warmup_iterations.append({"index": i, "epoch": epoch, "start_ns": start, "batch_ns": batch, "end_ns": end})
    emit(
        {
            "event": "ready",
            "pid": os.getpid(),
            "ts_ns": time.monotonic_ns(),
            "worker_pids": stream.worker_pids(),
            "pin_memory_tid": stream.pin_memory_tid(),
        }
    )
    if args.go_file:
        wait_for(args.go_file)

    iterations = []
    for i in range(args.iterations):
        start = time.monotonic_ns()
        epoch, (images, labels) = stream.next()
        batch = time.monotonic_ns()
        loss = train_step(images, labels)
        end = time.monotonic_ns()
        iterations.append({"index": i, "epoch": epoch, "start_ns": start, "batch_ns": batch, "end_ns": end, "loss": round(loss, 4)})
        if args.progress:
            emit({"event": "iteration", **iterations[-1]})

    stop_metrics.set()
    span_s = (iterations[-1]["end_ns"] - iterations[0]["start_ns"]) / 1e9
    emit(
        {
            "event": "summary",
            "pid": os.getpid(),
            "iterations": iterations,
            "warmup_iterations": warmup_iterations,
            "span_s": span_s,
            "iterations_per_s": len(iterations) / span_s,
            "images_per_s": len(iterations) * args.batch_size / span_s,
            "data_wait_s": sum(it["batch_ns"] - it["start_ns"] for it in iterations) / 1e9,
            "epochs": iterations[-1]["epoch"] + 1,
            "pin_memory_tid": stream.pin_memory_tid(),
            "last_worker_pids": stream.worker_pids(),
            "main_threads": thread_table(),
        }
    )


if __name__ == "__main__":
    main()
