"""Sums Nsight Compute's kernel durations by kernel, for scripts/gpu_check.sh's profile step.

    python scripts/gpu_profile.py PROFILE_CSV OUT_MD

PROFILE_CSV holds the CSV lines of `ncu --metrics gpu__time_duration.sum --csv` runs, each line
prefixed with the label of its run and a comma (gpu_check.sh writes it so). Either of ncu's CSV
pages is read: `details` (one row per kernel and metric, with "Metric Name", "Metric Unit" and
"Metric Value" columns) or `raw` (one column per metric, the units in the row under the header).
Writes a Markdown table per label: each kernel's launches, milliseconds and share of the label's
kernel time, longest first.
"""
import collections
import csv
import sys

METRIC = "gpu__time_duration.sum"
# Microseconds per unit.
UNITS = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
         "second": 1e6, "s": 1e6}
NAME_COLUMNS = ("Kernel Name", "Function Name", "Name")


def short(name):
    """A kernel's name without its arguments, at most 100 characters."""
    return (name.split("(")[0].strip() or name)[:100]


def read(path):
    """{label: Counter(kernel -> microseconds)}, {label: Counter(kernel -> launches)}."""
    times = collections.defaultdict(collections.Counter)
    launches = collections.defaultdict(collections.Counter)
    header, raw_unit = {}, {}
    for line in open(path, encoding="utf-8", errors="replace"):
        label, _, rest = line.rstrip("\n").partition(",")
        try:
            row = next(csv.reader([rest]))
        except (csv.Error, StopIteration):
            continue
        name_col = next((c for c in NAME_COLUMNS if c in row), None)
        if name_col:
            header[label] = {c: i for i, c in enumerate(row)}
            header[label]["__name"] = header[label][name_col]
            raw_unit.pop(label, None)
            continue
        h = header.get(label)
        if not h or len(row) <= h["__name"]:
            continue
        if "Metric Name" in h:
            if len(row) <= h["Metric Value"] or row[h["Metric Name"]] != METRIC:
                continue
            value, unit = row[h["Metric Value"]], row[h["Metric Unit"]]
        else:
            col = next((i for c, i in h.items() if c.startswith(METRIC)), None)
            if col is None or len(row) <= col:
                continue
            if label not in raw_unit:
                # The raw page's second row holds each metric's unit.
                raw_unit[label] = row[col]
                continue
            value, unit = row[col], raw_unit[label]
        try:
            us = float(value.replace(",", "")) * UNITS.get(unit.strip(), 1.0)
        except ValueError:
            continue
        kernel = short(row[h["__name"]])
        times[label][kernel] += us
        launches[label][kernel] += 1
    return times, launches


def table(times, launches, top=25):
    out = [f"Kernel time by kernel (Nsight Compute, {METRIC}, clocks not locked): every pass "
           "device_bench made (a warm-up and the timed one).", ""]
    for label, by_kernel in times.items():
        total = sum(by_kernel.values())
        out += [f"## {label}: {total / 1e3:.1f} ms of kernels, "
                f"{sum(launches[label].values())} launches", "",
                "| kernel | launches | ms | share |", "| --- | ---: | ---: | ---: |"]
        for kernel, us in by_kernel.most_common(top):
            out.append(f"| `{kernel}` | {launches[label][kernel]} | {us / 1e3:.2f} | "
                       f"{100 * us / total:.1f} % |")
        out.append("")
    if not times:
        out.append("No kernel durations were found in the profile (see gpu_check.log).")
    return "\n".join(out) + "\n"


def main():
    src, dst = sys.argv[1:3]
    text = table(*read(src))
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
