"""The host CPU's identity (issue 47): a measured CPU target's fingerprint version is keyed by
vendor, family, model and the instruction-set extensions that change kernel choice, not by the
model name alone ("AMD EPYC" on an AVX2-only part and on an AVX-512+bf16 one)."""
from __future__ import annotations

import platform

import pytest

from metainfer_core.backends import cpu_features, create_backend
from metainfer_core.backends.cpu_features import host_cpu, parse_cpuinfo
from metainfer_core.backends.ov_backend import ov_firmware

CPU_SPEC = {"providers": ["CPUExecutionProvider"], "intra_op_threads": 1, "memory_limit_bytes": 1 << 33}

EPYC_FLAGS = ("fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
              "syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl cpuid extd_apicid pni "
              "pclmulqdq ssse3 fma cx16 pcid sse4_1 sse4_2 x2apic movbe popcnt aes xsave avx f16c rdrand "
              "hypervisor lahf_lm cmp_legacy cr8_legacy abm sse4a misalignsse 3dnowprefetch bmi1 avx2 smep bmi2 "
              "erms invpcid rdseed adx smap clflushopt clwb sha_ni xsaveopt xsavec xgetbv1 xsaves")
AVX512 = " avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni avx512_bitalg avx512_vpopcntdq"


def x86(flags: str, model_name: str | None = "AMD EPYC", family: int = 25, model: int = 17) -> str:
    """A two-processor /proc/cpuinfo of an x86 host."""
    block = "\n".join(line for line in (
        "processor\t: {n}", "vendor_id\t: AuthenticAMD", f"cpu family\t: {family}", f"model\t\t: {model}",
        f"model name\t: {model_name}" if model_name is not None else None, "stepping\t: 1",
        "microcode\t: 0xa101144", "cpu MHz\t\t: 2396.398", "cache size\t: 1024 KB", f"flags\t\t: {flags}",
        "bogomips\t: 4792.79", "address sizes\t: 52 bits physical, 57 bits virtual", "") if line is not None)
    return "\n".join(block.format(n=n) for n in range(2))


_ARM_BLOCK = """processor\t: {n}
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm jscvt fcma lrcpc dcpop \
sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm ssbs sb paca pacg dcpodp sve2 sveaes svepmull \
svebitperm svesha3 svesm4 flagm2 frint svei8mm svebf16 i8mm bf16 dgh rng bti
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x0
CPU part\t: 0xd4f
CPU revision\t: 0
"""
ARM = "\n".join(_ARM_BLOCK.format(n=n) for n in range(2))   # a two-processor Arm host


@pytest.fixture
def version_on(monkeypatch):
    """version_on(cpuinfo text) -> the fingerprint version the ONNX Runtime backend reports on
    a host described by it (the backend's own path, the host's identity swapped)."""
    def version(text: str) -> str:
        monkeypatch.setattr(cpu_features, "host_cpu", lambda: parse_cpuinfo(text, "x86_64"))
        info = create_backend("metainfer_core.backends.ort_backend.OrtBackend", "cpu", "measured", CPU_SPEC).info
        assert info.firmware == parse_cpuinfo(text, "x86_64").tag
        return info.fingerprint_version

    return version


def test_one_isa_flag_is_a_new_fingerprint_version(version_on, monkeypatch):
    base, bf16 = x86(EPYC_FLAGS + AVX512), x86(EPYC_FLAGS + AVX512 + " avx512_bf16")
    a, b = parse_cpuinfo(base), parse_cpuinfo(bf16)
    assert a.name == b.name == "AMD EPYC" and set(b.features) - set(a.features) == {"avx512_bf16"}
    assert "avx512_bf16" in b.tag and "avx512_bf16" not in a.tag
    assert version_on(base) != version_on(bf16)
    # the AVX2-only part under the same name is a third version
    avx2 = parse_cpuinfo(x86(EPYC_FLAGS))
    assert "avx2" in avx2.features and "avx512f" not in avx2.features
    assert len({version_on(base), version_on(bf16), version_on(x86(EPYC_FLAGS))}) == 3
    # the OpenVINO path carries the same identity
    for text in (base, bf16):
        monkeypatch.setattr(cpu_features, "host_cpu", lambda text=text: parse_cpuinfo(text))
        assert ov_firmware("AMD EPYC") == parse_cpuinfo(text).tag


def test_flags_that_do_not_change_kernel_choice_keep_the_version(version_on):
    without = EPYC_FLAGS.replace(" ht ", " ").replace(" pni ", " ")
    assert parse_cpuinfo(x86(without + AVX512)) == parse_cpuinfo(x86(EPYC_FLAGS + AVX512))
    assert version_on(x86(without + AVX512)) == version_on(x86(EPYC_FLAGS + AVX512 + " hypervisor"))


def test_family_or_model_is_a_new_version(version_on):
    flags = EPYC_FLAGS + AVX512
    assert len({version_on(x86(flags)), version_on(x86(flags, family=26)), version_on(x86(flags, model=1))}) == 3


def test_no_model_name_still_names_vendor_family_model_and_isa(version_on):
    ident = parse_cpuinfo(x86(EPYC_FLAGS + AVX512, model_name=None))
    assert ident.name == "" and ident.tag.startswith("AuthenticAMD fam25 model17 isa=sse4_2,avx,avx2,")
    assert "unknown" not in ident.tag and "avx512f" in ident.features
    named = parse_cpuinfo(x86(EPYC_FLAGS + AVX512))
    assert named.tag == 'AuthenticAMD fam25 model17 "AMD EPYC" isa=' + ",".join(named.features)
    assert version_on(x86(EPYC_FLAGS + AVX512, model_name=None)) != version_on(x86(EPYC_FLAGS, model_name=None))


def test_arm_features():
    ident = parse_cpuinfo(ARM, "aarch64")
    assert ident.arch == "arm" and ident.vendor == "ARM/0x41" and ident.family == "8" and ident.model == "0xd4f"
    assert ident.features == ("asimd", "asimdhp", "asimddp", "i8mm", "bf16", "sve", "sve2")
    assert ident.tag == "ARM/0x41 arch8 part0xd4f isa=asimd,asimdhp,asimddp,i8mm,bf16,sve,sve2"
    # a NEON-only part (no dot product, no SVE) is told apart
    plain = parse_cpuinfo(ARM.replace(" asimddp", "").replace(" sve ", " ").replace(" sve2", ""))
    assert plain.features == ("asimd", "asimdhp", "i8mm", "bf16") and plain.tag != ident.tag


def test_no_cpuinfo_falls_back_to_platform():
    ident = parse_cpuinfo("", "arm64", "arm")
    assert ident.vendor == "arm64" and ident.name == "arm" and ident.features == ()
    assert ident.tag == 'arm64 "arm" isa=none'


def test_long_model_names_keep_the_tag_short():
    ident = parse_cpuinfo(x86(EPYC_FLAGS + AVX512, model_name="X" * 300))
    assert len(ident.tag) < 256 and ident.tag.startswith("AuthenticAMD fam25 model17 ")


def test_real_host():
    ident = host_cpu()
    assert ident is host_cpu()                       # read once
    assert ident.vendor and ident.vendor in ident.tag
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        text = ""
    if "vendor_id" in text:
        vendor = next(line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("vendor_id"))
        assert ident.arch == "x86" and ident.vendor == vendor and ident.family and ident.model
        if platform.machine() in ("x86_64", "AMD64"):
            assert "sse4_2" in ident.features          # every x86-64 host this runs on has it
    cpu = create_backend("metainfer_core.backends.ort_backend.OrtBackend", "cpu", "measured", CPU_SPEC)
    assert cpu.info.firmware == ident.tag
    print(ident.tag)
