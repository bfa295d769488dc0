"""The host CPU described by what changes kernel choice: vendor, family, model and the
instruction-set extensions the runtimes' kernels dispatch on (AVX-512, bf16, VNNI, AMX, SVE ...).

A model name alone does not tell CPUs apart ("AMD EPYC" reads the same on an AVX2-only part and on
an AVX-512+bf16 one), so the measured backends key their fingerprint version by this identity
(`CpuIdentity.tag` is their firmware). Linux: parsed from /proc/cpuinfo (`parse_cpuinfo` takes
the text, so any description can be fed to it); elsewhere: what `platform` knows."""
from __future__ import annotations

import functools
import platform
from dataclasses import dataclass

# the extensions that change which kernel a runtime picks, oldest first (the tag's order);
# spelled as Linux writes them in /proc/cpuinfo (x86 `flags`, Arm `Features`)
X86_FEATURES = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16")
# asimd is NEON (armv7 kernels write `neon`); asimdhp: fp16 arithmetic; asimddp: dot product
ARM_FEATURES = ("neon", "asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2", "sme")
_ORDER = {f: i for i, f in enumerate(X86_FEATURES + ARM_FEATURES)}

# Arm `CPU implementer` codes (MIDR_EL1) named in the tag; others show as their code
_ARM_IMPLEMENTERS = {"0x41": "ARM", "0x42": "Broadcom", "0x43": "Cavium", "0x46": "Fujitsu", "0x48": "HiSilicon",
                     "0x4e": "NVIDIA", "0x50": "APM", "0x51": "Qualcomm", "0x61": "Apple", "0x6d": "Microsoft",
                     "0xc0": "Ampere"}
_NAME_CHARS = 64          # the tag is stored as a 256-character firmware column


@dataclass(frozen=True)
class CpuIdentity:
    arch: str                 # "x86", "arm" or platform.machine()
    vendor: str               # x86 vendor_id (AuthenticAMD, GenuineIntel); Arm implementer (ARM/0x41)
    family: str               # x86 cpu family; Arm CPU architecture
    model: str                # x86 model; Arm CPU part(s)
    name: str                 # model name ("" where the OS gives none)
    features: tuple[str, ...]  # the kernel-relevant extensions present, in X86_FEATURES/ARM_FEATURES order

    @property
    def tag(self) -> str:
        """Short and readable, and different whenever vendor, family, model, name or a listed
        extension differs, e.g. `AuthenticAMD fam25 model17 "AMD EPYC" isa=sse4_2,avx,avx2,...`."""
        if self.arch == "x86":
            parts = [self.vendor, f"fam{self.family or '?'}", f"model{self.model or '?'}"]
        elif self.arch == "arm":
            parts = [self.vendor, f"arch{self.family or '?'}", f"part{self.model or '?'}"]
        else:
            parts = [self.vendor] + [p for p in (self.family, self.model) if p]
        if self.name:
            name = self.name if len(self.name) <= _NAME_CHARS else self.name[:_NAME_CHARS - 1] + "~"
            parts.append(f'"{name}"')
        parts.append("isa=" + (",".join(self.features) or "none"))
        return " ".join(p for p in parts if p)


def kernel_features(flags: str | list[str]) -> tuple[str, ...]:
    """The kernel-relevant subset of a flags/Features list, in a fixed order."""
    present = set(flags.split() if isinstance(flags, str) else flags)
    return tuple(sorted((f for f in present if f in _ORDER), key=_ORDER.__getitem__))


def _blocks(text: str) -> list[dict[str, str]]:
    """/proc/cpuinfo as one key->value dict per blank-line separated block (a processor each)."""
    blocks, cur = [], {}
    for line in text.splitlines():
        if not line.strip():
            if cur:
                blocks.append(cur)
            cur = {}
            continue
        if ":" in line:
            key, value = line.split(":", 1)
            cur.setdefault(key.strip(), value.strip())
    if cur:
        blocks.append(cur)
    return blocks


def parse_cpuinfo(text: str, machine: str = "", processor: str = "") -> CpuIdentity:
    """A CpuIdentity from the text of a /proc/cpuinfo (x86 or Arm); `machine`/`processor` name it
    when the text describes neither."""
    blocks = _blocks(text)
    first = lambda key: next((b[key] for b in blocks if b.get(key)), "")   # noqa: E731
    name = first("model name") or first("Processor")          # armv7 kernels: `Processor`
    if first("vendor_id") and first("flags"):
        return CpuIdentity("x86", first("vendor_id"), first("cpu family"), first("model"), name,
                           kernel_features(first("flags")))
    if first("CPU implementer"):
        code = first("CPU implementer").lower()
        vendor = f"{_ARM_IMPLEMENTERS[code]}/{code}" if code in _ARM_IMPLEMENTERS else code
        # big.LITTLE parts differ per core; the extensions the kernel reports are system-wide
        parts = sorted({b["CPU part"].lower() for b in blocks if b.get("CPU part")})
        return CpuIdentity("arm", vendor, first("CPU architecture"), "/".join(parts), name,
                           kernel_features(first("Features")))
    vendor = first("vendor_id") or machine or processor or "unknown"
    return CpuIdentity(machine or "unknown", vendor, first("cpu family"), first("model"),
                       name or (processor if processor not in ("", vendor) else ""), kernel_features(first("flags")))


@functools.lru_cache(maxsize=1)
def host_cpu() -> CpuIdentity:
    """This machine's CpuIdentity (read once per process)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        text = ""
    return parse_cpuinfo(text, platform.machine(), platform.processor())


def cpu_firmware() -> str:
    """The firmware string of a measured CPU target: this host's tag (a new fingerprint version
    on a CPU differing in vendor, family, model or a kernel-relevant extension)."""
    return host_cpu().tag
