"""WGSL math helpers shared by kernels: functions whose accuracy the adapter's builtins do not guarantee.

A kernel's expression names them (`exp4(`, `tanh4(`, ...); `helpers_for` returns the definitions it needs,
dependencies first, so each kernel's text carries only the helpers it calls.
"""

from __future__ import annotations

# Abramowitz & Stegun 7.1.26, |error| < 1.5e-7. |x| is capped at 10 (erf is exactly +-1 in f32 from ~3.9 on), so
# the divisor stays in [1, 4.3]: GPUs divide accurately only by |d| < 2^126 and an infinite x would give inf / inf.
ERF = ("fn erf4(x: vec4<f32>) -> vec4<f32> {\n"
       "  let z = min(abs(x), vec4<f32>(10.0));\n"
       "  let t = 1.0 / (1.0 + 0.3275911 * z);\n"
       "  let y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t"
       " + 0.254829592) * t * exp4(-z * z);\n"
       "  return sign(x) * y;\n}\n")
# WGSL's tanh may return NaN for large |x| (it is sinh/cosh on some drivers), so tanh|x| = (1 - e) / (1 + e) with
# e = exp(-2|x|) -> 0; 1 - e and 1 + e come from expm1 (1 - e = -m, 1 + e = 2 + m), not from e, whose rounding
# would cancel in 1 - e near 0 (was 1,560 ULP off at x ~ 1e-3, XNNPACK 4.2).
TANH = ("fn tanh4(x: vec4<f32>) -> vec4<f32> {\n  let m = expm1_4(-2.0 * abs(x));\n"
        "  return sign(x) * (-m / (2.0 + m));\n}\n")
# std::pow semantics: x^0 = 1, 0^y = 0 or inf, negative bases only with integral exponents (NaN otherwise).
POW = ("fn pow4(a: vec4<f32>, b: vec4<f32>) -> vec4<f32> {\n"
       "  let zero = vec4<f32>(0.0);\n"
       "  let inf = vec4<f32>(bitcast<f32>(0x7f800000u));\n"
       "  let nan = vec4<f32>(bitcast<f32>(0x7fc00000u));\n"
       "  let m = exp2(b * log2(abs(a)));\n"
       "  let integral = floor(b) == b;\n"
       "  let odd = integral & (abs(b - 2.0 * floor(b * 0.5)) == vec4<f32>(1.0));\n"
       "  var r = select(m, -m, (a < zero) & odd);\n"
       "  r = select(r, nan, (a < zero) & !integral);\n"
       "  r = select(r, select(inf, zero, b > zero), a == zero);\n"
       "  return select(r, vec4<f32>(1.0), b == zero);\n}\n")
# Vulkan bounds sin/cos error only on [-pi, pi]: reduce by 2*pi first (Cody-Waite, 2*pi split as 6.28125 +
# rest so k * 6.28125 is exact), accurate for |x| up to ~1e5.
TURNS = ("fn turns4(x: vec4<f32>) -> vec4<f32> {\n  let k = round(x * 0.15915494309189535);\n"
         "  return (x - k * 6.28125) - k * 0.0019353071795864769;\n}\n")
# exp with an accuracy that does not depend on x. WGSL allows exp an error of 3 + 2|x| ULP (lavapipe computes
# exp2(x * log2(e)), whose rounded argument costs ~|x| ULP): LOGISTIC(-20) was 17 ULP off where XNNPACK is within
# 3.4, EXP(80) 60 ULP (tests/test_accuracy.py). exp(x) = 2^n exp(r): n = round(x / ln 2), r = x - n ln 2 in
# [-0.35, 0.35] with ln 2 split in two (n * 0.693145751953125 is exact for |n| < 256), exp(r) by its Taylor
# polynomial of degree 7 (truncation 0.1 ULP): within 1.2 ULP on lavapipe. x is clamped so 2^n stays in ldexp's
# range; results past f32's range are set as LiteRT's (inf, 0), NaN passes.
EXP = ("fn exp4(x: vec4<f32>) -> vec4<f32> {\n"
       "  let c = clamp(x, vec4<f32>(-104.0), vec4<f32>(88.72283935546875));\n"
       "  let n = round(c * 1.4426950408889634);\n"
       "  let r = (c - n * 0.693145751953125) - n * 1.4286068203094173e-06;\n"
       "  let p = 1.0 + r * (1.0 + r * (0.5 + r * (0.16666666666666666 + r * (0.041666666666666664 + r * (\n"
       "    0.008333333333333333 + r * (0.001388888888888889 + r * 0.0001984126984126984))))));\n"
       "  var e = select(ldexp(p, vec4<i32>(n)), vec4<f32>(0.0), x < vec4<f32>(-104.0));\n"
       "  e = select(e, vec4<f32>(bitcast<f32>(0x7f800000u)), x > vec4<f32>(88.72283935546875));\n"
       "  return select(e, x, (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u));\n}\n")
# exp(x) - 1 without the cancellation of exp4(x) - 1 near 0 (ELU was 3,800 ULP off there, XNNPACK 3.3): the same
# reduction, the polynomial of exp(r) - 1 (no leading 1), then 2^n (exp(r) - 1) + (2^n - 1), exact for n = 0.
EXPM1 = ("fn expm1_4(x: vec4<f32>) -> vec4<f32> {\n"
         "  let c = clamp(x, vec4<f32>(-104.0), vec4<f32>(88.72283935546875));\n"
         "  let n = round(c * 1.4426950408889634);\n"
         "  let r = (c - n * 0.693145751953125) - n * 1.4286068203094173e-06;\n"
         "  let q = r * (1.0 + r * (0.5 + r * (0.16666666666666666 + r * (0.041666666666666664 + r * (\n"
         "    0.008333333333333333 + r * (0.001388888888888889 + r * 0.0001984126984126984))))));\n"
         "  let k = vec4<i32>(n);\n"
         "  var e = select(ldexp(q, k) + (ldexp(vec4<f32>(1.0), k) - 1.0), q, k == vec4<i32>(0));\n"
         "  e = select(e, vec4<f32>(-1.0), x < vec4<f32>(-104.0));\n"
         "  e = select(e, vec4<f32>(bitcast<f32>(0x7f800000u)), x > vec4<f32>(88.72283935546875));\n"
         "  return select(e, x, (bitcast<vec4<u32>>(x) & vec4<u32>(0x7fffffffu)) > vec4<u32>(0x7f800000u));\n}\n")
# LiteRT's integer output stage, MultiplyByQuantizedMultiplier, in exact 32-bit integer arithmetic (WGSL has no
# i64; kernels/common.py explains it): exact int8 FULLY_CONNECTED, BATCH_MATMUL and convs call it in their
# epilogues, int8 ADD / SUB in their expression.
MULTIPLY_BY_QUANTIZED_MULTIPLIER = """fn rounding_high_mul(a: i32, m: i32) -> i32 {
  let x = u32(abs(a));
  let y = u32(m);
  let p00 = (x & 0xffffu) * (y & 0xffffu);
  let p01 = (x & 0xffffu) * (y >> 16u);
  let p10 = (x >> 16u) * (y & 0xffffu);
  let p11 = (x >> 16u) * (y >> 16u);
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  let lo = (p00 & 0xffffu) | (mid << 16u);
  let hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
  let nudged = lo + select(0x40000000u, 0x3fffffffu, a < 0);
  let high = ((hi + select(0u, 1u, nudged < lo)) << 1u) | (nudged >> 31u);
  return select(i32(high), -i32(high), a < 0);
}
fn rounding_shift_right(x: i32, exponent: u32) -> i32 {
  return (x + i32((1u << exponent) >> 1u)) >> exponent;
}
fn rounding_divide_by_pot(x: i32, exponent: u32) -> i32 {
  let mask = i32((1u << exponent) - 1u);
  let threshold = (mask >> 1u) + select(0, 1, x < 0);
  return (x >> exponent) + select(0, 1, (x & mask) > threshold);
}
fn multiply_by_quantized_multiplier(acc: vec4<i32>, multiplier: vec4<i32>, shift: vec4<i32>, ruy: bool) -> vec4<i32> {
  var out = vec4<i32>(0);
  for (var l = 0u; l < 4u; l++) {
    let high = rounding_high_mul(acc[l] << u32(max(shift[l], 0)), multiplier[l]);
    let right = u32(max(-shift[l], 0));
    out[l] = select(rounding_divide_by_pot(high, right), rounding_shift_right(high, right), ruy);
  }
  return out;
}
"""
# (x * multiplier + 2^(t - 1)) >> t with t = 31 - shift in 64-bit arithmetic: one rounding (ties up), as LiteRT
# 2.3.0's int8 ADD / SUB scale their inputs (measured: 0 of 2.6 million elements off, where MultiplyByQuantized-
# Multiplier's two roundings miss 2). The 62-bit product |x| * multiplier from 16-bit pieces; shift <= 0.
SINGLE_ROUNDING_MULTIPLY = """fn single_rounding_multiply(v: vec4<i32>, m: i32, shift: i32) -> vec4<i32> {
  let t = u32(31 - shift);
  let y = u32(m);
  var out = vec4<i32>(0);
  for (var l = 0u; l < 4u; l++) {
    let x = u32(abs(v[l]));
    let p00 = (x & 0xffffu) * (y & 0xffffu);
    let p01 = (x & 0xffffu) * (y >> 16u);
    let p10 = (x >> 16u) * (y & 0xffffu);
    let p11 = (x >> 16u) * (y >> 16u);
    let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
    var lo = (p00 & 0xffffu) | (mid << 16u);
    var hi = p11 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    // + 2^(t - 1), less 1 for a negative x (its ties go up, towards zero)
    var add_lo = select(0u, 1u << (t - 1u), t - 1u < 32u);
    var add_hi = select(0u, 1u << (t - 33u), t - 1u >= 32u);
    if (v[l] < 0) {
      add_hi = select(add_hi, add_hi - 1u, add_lo == 0u);
      add_lo = add_lo - 1u;
    }
    let sum_lo = lo + add_lo;
    hi = hi + add_hi + select(0u, 1u, sum_lo < lo);
    lo = sum_lo;
    let r = select((hi << (32u - t)) | (lo >> t), hi >> (t - 32u), t >= 32u);
    out[l] = select(i32(r), -i32(r), v[l] < 0);
  }
  return out;
}
"""
# name -> definition; a definition may call those listed before it
HELPERS = {"exp4(": EXP, "expm1_4(": EXPM1, "erf4(": ERF, "tanh4(": TANH, "pow4(": POW, "turns4(": TURNS,
           "multiply_by_quantized_multiplier(": MULTIPLY_BY_QUANTIZED_MULTIPLIER,
           "single_rounding_multiply(": SINGLE_ROUNDING_MULTIPLY}


def helpers_for(*texts: str) -> list[str]:
    """The helper definitions the texts call, each once, every one after the helpers it calls."""
    needed: set[str] = set()
    pending = list(texts)
    while pending:
        text = pending.pop()
        for key, code in HELPERS.items():
            if key in text and key not in needed:
                needed.add(key)
                pending.append(code)
    return [code for key, code in HELPERS.items() if key in needed]
