//! Go `encoding/json` formatting of a float64 (`floatEncoder`), byte for byte.
//!
//! Digits are the shortest that round-trip, and among equally short candidates the closest one;
//! an exact tie goes to the even last digit (Go's Ryū and the ECMAScript rule). Rust's own
//! shortest formatting rounds such ties up (`703300801258555.25` → `…555.3`, Go prints `…555.2`),
//! so ties are detected from the exact expansion and re-rounded here.

/// Go's JSON text of a finite `f`.
pub(super) fn format(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    let abs = f.abs();
    let (digits, exp) = shortest(abs);
    let mut out = String::with_capacity(digits.len() + 8);
    if f < 0.0 {
        out.push('-');
    }
    if (1e-6..1e21).contains(&abs) {
        write_fixed(&mut out, &digits, exp);
    } else {
        write_exponent(&mut out, &digits, exp);
    }
    out
}

/// `d1.d2d3… × 10^exp` → `'f'` notation.
fn write_fixed(out: &mut String, digits: &[u8], exp: i32) {
    let n = digits.len() as i32;
    if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        push_digits(out, digits);
    } else if exp + 1 >= n {
        push_digits(out, digits);
        for _ in 0..(exp + 1 - n) {
            out.push('0');
        }
    } else {
        let split = (exp + 1) as usize;
        push_digits(out, &digits[..split]);
        out.push('.');
        push_digits(out, &digits[split..]);
    }
}

/// `d1.d2d3… × 10^exp` → Go `'e'` notation after its "e-07 → e-7" clean-up: positive exponents
/// keep two digits at least (`1e+21`), negative ones none (`1e-7`).
fn write_exponent(out: &mut String, digits: &[u8], exp: i32) {
    push_digits(out, &digits[..1]);
    if digits.len() > 1 {
        out.push('.');
        push_digits(out, &digits[1..]);
    }
    if exp < 0 {
        out.push_str("e-");
        out.push_str(&exp.unsigned_abs().to_string());
    } else {
        out.push_str(if exp < 10 { "e+0" } else { "e+" });
        out.push_str(&exp.to_string());
    }
}

fn push_digits(out: &mut String, digits: &[u8]) {
    out.extend(digits.iter().map(|&d| char::from(d)));
}

/// Shortest round-trip digits of a positive finite `abs` (ASCII, no trailing zeros) and the
/// exponent of the first digit, with exact ties rounded to even.
fn shortest(abs: f64) -> (Vec<u8>, i32) {
    let (digits, exp) = split_scientific(&format!("{abs:e}"));
    let n = digits.len();
    // A tie needs an exact expansion of n+1 significant digits ending in 5. Cheap filter first:
    // the correctly rounded n+1-digit form must end in 5; then confirm with the exact expansion
    // (767 significant digits cover every f64).
    let (near, _) = split_scientific(&format!("{abs:.n$e}"));
    if near.len() != n + 1 || near.last() != Some(&b'5') {
        return (digits, exp);
    }
    let (exact, exact_exp) = split_scientific(&format!("{abs:.800e}"));
    if exact.len() != n + 1 || exact.last() != Some(&b'5') {
        return (digits, exp);
    }
    let mut even = exact[..n].to_vec();
    let mut even_exp = exact_exp;
    if even.last().is_some_and(|d| (d - b'0') % 2 == 1) {
        increment(&mut even, &mut even_exp);
    }
    trim_zeros(&mut even);
    if parse_back(&even, even_exp) == Some(abs) {
        (even, even_exp)
    } else {
        (digits, exp)
    }
}

/// Adds one unit in the last place of a decimal digit string, carrying into the exponent.
fn increment(digits: &mut Vec<u8>, exp: &mut i32) {
    for d in digits.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return;
        }
    }
    digits.insert(0, b'1');
    digits.pop();
    *exp += 1;
}

fn trim_zeros(digits: &mut Vec<u8>) {
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop();
    }
}

fn parse_back(digits: &[u8], exp: i32) -> Option<f64> {
    let s = std::str::from_utf8(digits).ok()?;
    format!("0.{s}e{}", exp + 1).parse().ok()
}

/// `"d.ddde-7"` (Rust `{:e}` output) → (`b"dddd"` without trailing zeros, -7).
fn split_scientific(s: &str) -> (Vec<u8>, i32) {
    let (mantissa, exp) = s.split_once('e').unwrap_or((s, "0"));
    let mut digits: Vec<u8> = mantissa.bytes().filter(u8::is_ascii_digit).collect();
    trim_zeros(&mut digits);
    (digits, exp.parse().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::format;

    #[test]
    fn ties_round_to_even_like_go() {
        // Exact binary values halfway between two shortest decimal candidates.
        let cases = [
            ("703300801258555.25", "703300801258555.2"),
            ("24863659056077.5625", "24863659056077.562"),
            ("21100648113006.8125", "21100648113006.812"),
            ("-9551502366706.3125", "-9551502366706.312"),
        ];
        for (input, want) in cases {
            assert_eq!(format(input.parse().unwrap()), want, "{input}");
        }
    }

    #[test]
    fn notation_switches_at_go_cutoffs() {
        assert_eq!(format(1e-6), "0.000001");
        assert_eq!(format(9.99e-7), "9.99e-7");
        assert_eq!(format(1e21), "1e+21");
        assert_eq!(format(999999999999999900000.0), "999999999999999900000");
        assert_eq!(format(1.7976931348623157e308), "1.7976931348623157e+308");
        assert_eq!(format(f64::MIN_POSITIVE), "2.2250738585072014e-308");
        assert_eq!(format(123.456), "123.456");
        assert_eq!(format(0.001), "0.001");
        assert_eq!(format(-0.0), "-0");
    }
}
