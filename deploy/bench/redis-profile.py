"""Summaries for deploy/bench/redis-profile.sh.

  redis-profile.py stacks   < `perf script` output of one redis-server
  redis-profile.py aof FILE...   (appendonly.aof.N.incr.aof files)

stacks puts each sample in one bucket by the frames on its stack (leaf
first in perf's output) and prints the buckets' shares; aof prints the
commands a master appended to its AOF, with their bytes.
"""
import collections
import sys


def samples(lines):
    """Yield each sample's function names, leaf first."""
    frames = None
    for line in lines:
        if not line.strip():
            if frames:
                yield frames
            frames = None
        elif not line[0].isspace():
            frames = []  # a sample's header line
        elif frames is not None:
            parts = line.split()
            frames.append(parts[1].split("+")[0] if len(parts) > 1 else "?")
    if frames:
        yield frames


def command_of(frames, below):
    """The command function the sample is in: the frame above the nearest
    call() leafward of index below (or the leaf itself)."""
    calls = [i for i, f in enumerate(frames[:below]) if f == "call"]
    if not calls:
        return "the look-up of the command and its ACL check"
    if calls[-1] == 0:
        return "call()'s bookkeeping (timing, latency histogram, the propagation queue)"
    proc = frames[calls[-1] - 1]
    if proc.endswith("Command"):
        return proc
    return INLINED.get(proc, "call()'s bookkeeping (timing, latency histogram, the propagation queue)")


# Command functions the compiler inlined, by the frame perf sees instead.
INLINED = {"addHashFieldToReply": "hgetCommand"}


def bucket(frames):
    names = set(frames)
    # Replies are written from beforeSleep: look for them first.
    if names & {"handleClientsWithPendingWrites", "handleClientsWithPendingWritesUsingThreads",
                "writeToClient", "_writeToClient"}:
        return "network: writing replies"
    if "beforeSleep" in names:
        if any("fsync" in f or "fdatasync" in f for f in frames):
            return "AOF: fsync (appendfsync always: once per event-loop turn that wrote)"
        if "flushAppendOnlyFile" in names:
            return "AOF: write(2) of the turn's buffer"
        return "event loop: beforeSleep, other"
    if "propagatePendingCommands" in names or "propagateNow" in names:
        return "AOF: encoding the commands to append (every write a script made, XCLAIM for each entry XREADGROUP delivers)"
    if "evalGenericCommand" in names:
        if "luaCreateArray" in names:
            return "script: KEYS and ARGV into Lua strings"
        if "scriptCall" in names:
            return "script: in redis.call, the command: " + command_of(frames, frames.index("scriptCall"))
        if "luaRedisGenericCommand" in names:
            return "script: in redis.call, around the command (arguments to objects, the reply back to Lua)"
        if "luaV_execute" in names:
            return "script: the Lua interpreter (the script's own code, its strings, GC)"
        return "script: set-up, the reply, the rest of EVALSHA"
    if "call" in frames:
        return "command: " + command_of(frames, len(frames))
    if "readQueryFromClient" in names:
        return "network: reading and parsing requests"
    return "other (the kernel, timers, the event loop)"


def stacks():
    counts = collections.Counter(bucket(f) for f in samples(sys.stdin))
    total = sum(counts.values())
    if not total:
        sys.exit("no samples: was perf allowed to record the process?")
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        if n * 200 >= total:  # 0.5% and up
            print(f"  {100 * n / total:5.1f}%  {name}")
    print(f"  ({total} samples; buckets under 0.5% not shown)")


def commands(data):
    """Yield (name, bytes) for each whole command in an AOF's RESP; a command
    cut short at the end (still being appended) is left out."""
    i = 0
    while i < len(data):
        start = i
        end = data.find(b"\r\n", i)
        if end < 0:
            return
        argc = int(data[i + 1:end])
        i = end + 2
        name = None
        for _ in range(argc):
            end = data.find(b"\r\n", i)
            if end < 0:
                return
            n = int(data[i + 1:end])
            if name is None:
                name = data[end + 2:end + 2 + n].decode().upper()
            i = end + 2 + n + 2
        if i > len(data):
            return
        yield name, i - start


def aof(paths):
    cmds, size = collections.Counter(), collections.Counter()
    for path in paths:
        for name, n in commands(open(path, "rb").read()):
            cmds[name] += 1
            size[name] += n
    total = sum(size.values())
    for name, b in size.most_common():
        print(f"  {name:10s} {cmds[name]:8d} commands {b:10d} bytes {100 * b / total:5.1f}%")


if __name__ == "__main__":
    if sys.argv[1:2] == ["stacks"]:
        stacks()
    elif sys.argv[1:2] == ["aof"] and len(sys.argv) >= 3:
        aof(sys.argv[2:])
    else:
        sys.exit(__doc__)
