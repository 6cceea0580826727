//! The sandbox's one wall clock: every timestamp it writes (creation, deletion, managed fields,
//! conditions) and every age it prints reads the time here.

use jiff::Timestamp;

/// The current time.
pub fn now() -> Timestamp {
    Timestamp::now()
}

/// The current time as `metav1.Time` serializes it (RFC 3339, whole seconds, UTC).
pub fn now_rfc3339() -> String {
    rfc3339(now())
}

/// `t` as `metav1.Time` serializes it.
pub fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// Whole seconds from `t` until now (negative for a time in the future).
pub fn seconds_since(t: Timestamp) -> i64 {
    now().as_second() - t.as_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metav1_time_has_whole_seconds_and_a_zulu_suffix() {
        let t: Timestamp = "2024-05-06T07:08:09.123456Z".parse().unwrap();
        assert_eq!(rfc3339(t), "2024-05-06T07:08:09Z");
        assert!(now_rfc3339().parse::<Timestamp>().is_ok());
    }

    #[test]
    fn seconds_since_counts_from_the_past() {
        let an_hour_ago = now() - jiff::SignedDuration::from_hours(1);
        let s = seconds_since(an_hour_ago);
        assert!((3599..=3601).contains(&s), "{s}");
    }
}
