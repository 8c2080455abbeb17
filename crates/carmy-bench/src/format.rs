//! How the report writes numbers: milliseconds, row counts (`10k`, `5M`) and thousands
//! separators.

pub(crate) fn ms(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |ms| format!("{ms:.2}"))
}

/// `10000` → `10k`, `5000000` → `5M`, else the number.
pub(crate) fn rows(count: Option<i64>) -> String {
    match count {
        None => "?".to_owned(),
        Some(n) if n >= 1_000_000 => format!("{}M", round_to(n as f64 / 1e6, 1)),
        Some(n) if n >= 10_000 => format!("{}k", round_to(n as f64 / 1e3, 0)),
        Some(n) => n.to_string(),
    }
}

/// `value` with at most `decimals` decimals, without trailing zeros.
fn round_to(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// `1234567.8` → `1,234,568`.
pub fn thousands(value: f64) -> String {
    let digits = format!("{:.0}", value.max(0.0));
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn formats() {
        assert_eq!(super::thousands(1_234_567.8), "1,234,568");
        assert_eq!(super::thousands(500_000.0), "500,000");
        assert_eq!(super::thousands(12.0), "12");
        assert_eq!(super::rows(Some(10_000)), "10k");
        assert_eq!(super::rows(Some(5_000_000)), "5M");
        assert_eq!(super::rows(Some(10_123)), "10k");
        assert_eq!(super::rows(Some(304_143)), "304k");
        assert_eq!(super::rows(Some(5_004_000)), "5M");
        assert_eq!(super::rows(Some(1_250_000)), "1.2M");
        assert_eq!(super::rows(Some(999)), "999");
    }
}
