//! The node's one wall clock: the times it writes into the API (pod and container timestamps,
//! condition transitions, the Node's heartbeats and Lease renewals) and into volume directory
//! names. Waiting and backoff use tokio's monotonic `Instant`, not this.

use jiff::Timestamp;

/// The current time.
pub fn now() -> Timestamp {
    Timestamp::now()
}

/// `at` as the API's `metav1.Time` writes it: RFC 3339 in UTC, whole seconds.
pub fn api_time(at: Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// [`now`] as [`api_time`] writes it.
pub fn api_now() -> String {
    api_time(now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_time_is_utc_whole_seconds() {
        let at: Timestamp = "2024-03-05T07:08:09.987654321Z".parse().unwrap();
        assert_eq!(api_time(at), "2024-03-05T07:08:09Z");
        assert_eq!(api_time(Timestamp::UNIX_EPOCH), "1970-01-01T00:00:00Z");
    }

    #[test]
    fn api_now_parses_back_as_a_time_near_now() {
        let before = now().as_second();
        let written: Timestamp = api_now().parse().unwrap();
        assert!((written.as_second() - before).abs() <= 1);
    }
}
