//! Limits on console logins (docs/operations.md, "The operator console"): every login post
//! counts against its client's address and against the first characters of the key it
//! presents, so nobody tries operator keys at speed, from one address or from many.
//!
//! Each limit is a bucket ([`governor`]'s keyed GCRA limiter): [`PER_ADDRESS`] posts at once,
//! then one more every [`REFILL`]; [`PER_PREFIX`] posts with keys that share their first
//! [`PREFIX_CHARS`] characters, refilled alike. A post over either limit is refused before
//! its key is checked (429 with `Retry-After`), whether the key is right or not, so a refused
//! guess tells nothing. The counts live in this process: each replica counts its own.
//!
//! The client's address ([`LoginLimits::client`]) is the connection's peer; behind a reverse
//! proxy every connection comes from the proxy, so a proxy listed as trusted
//! (`CARMY_TRUSTED_PROXIES`) names the client in `X-Forwarded-For` instead: the rightmost
//! address there that is not itself a trusted proxy (the one the outermost trusted proxy saw).
//! A header from a peer that is not trusted is ignored: anyone can write one.

use axum::http::HeaderMap;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

/// Login posts one client address may send at once (an IPv6 address counts by its /64).
pub(crate) const PER_ADDRESS: u32 = 10;

/// Login posts whose keys share their first [`PREFIX_CHARS`] characters, at once, from any
/// addresses.
pub(crate) const PER_PREFIX: u32 = 30;

/// The characters of a presented key that make the prefix counted by [`PER_PREFIX`].
pub(crate) const PREFIX_CHARS: usize = 8;

/// How often each bucket gets one post back.
pub(crate) const REFILL: Duration = Duration::from_secs(60);

/// Addresses and prefixes kept before the ones whose bucket is full again are forgotten.
const TRACKED: usize = 10_000;

/// The login limits of this process, and the proxies whose `X-Forwarded-For` it believes.
pub(crate) struct LoginLimits {
    by_address: DefaultKeyedRateLimiter<Option<IpAddr>>,
    by_prefix: DefaultKeyedRateLimiter<String>,
    trusted_proxies: Vec<IpAddr>,
}

impl std::fmt::Debug for LoginLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginLimits")
            .field("addresses", &self.by_address.len())
            .field("prefixes", &self.by_prefix.len())
            .finish()
    }
}

fn quota(burst: u32) -> Quota {
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    Quota::with_period(REFILL)
        .unwrap_or_else(|| Quota::per_minute(NonZeroU32::MIN))
        .allow_burst(burst)
}

impl LoginLimits {
    /// Limits that believe `X-Forwarded-For` only from `trusted_proxies`.
    pub(crate) fn new(trusted_proxies: Vec<IpAddr>) -> Self {
        Self {
            by_address: RateLimiter::keyed(quota(PER_ADDRESS)),
            by_prefix: RateLimiter::keyed(quota(PER_PREFIX)),
            trusted_proxies,
        }
    }

    /// The client's address of a request from `peer` (`None` when the server gave no
    /// connection info) with `headers`: see the module docs.
    pub(crate) fn client(&self, peer: Option<IpAddr>, headers: &HeaderMap) -> Option<IpAddr> {
        let peer = peer?;
        if !self.trusted(peer) {
            return Some(peer);
        }
        let forwarded: Vec<IpAddr> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .map(str::trim)
            .map(|entry| entry.parse::<IpAddr>().ok())
            .collect::<Option<Vec<IpAddr>>>()
            .unwrap_or_default();
        Some(
            forwarded
                .into_iter()
                .rev()
                .find(|address| !self.trusted(*address))
                .unwrap_or(peer),
        )
    }

    fn trusted(&self, address: IpAddr) -> bool {
        let address = address.to_canonical();
        self.trusted_proxies
            .iter()
            .any(|proxy| proxy.to_canonical() == address)
    }

    /// Counts one login post from `address` (`None`: not known, e.g. a router served without
    /// connection info; those share one bucket) presenting `key`. `Err` with how long to wait
    /// when it is over a limit: then nothing about the key may be checked.
    pub(crate) fn attempt(&self, address: Option<IpAddr>, key: &str) -> Result<(), Duration> {
        if self.by_address.len() > TRACKED {
            self.by_address.retain_recent();
        }
        if self.by_prefix.len() > TRACKED {
            self.by_prefix.retain_recent();
        }
        let prefix: String = key.trim().chars().take(PREFIX_CHARS).collect();
        if self
            .by_address
            .check_key(&address.map(per_network))
            .is_err()
            || self.by_prefix.check_key(&prefix).is_err()
        {
            return Err(REFILL);
        }
        Ok(())
    }
}

/// The address a client is counted under: an IPv4 address (also one mapped into IPv6) as it
/// is, an IPv6 address by its /64 (one host commonly holds a whole /64).
fn per_network(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(_) => address,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv6_host_counts_by_its_slash_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::9".parse().unwrap();
        let other: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(per_network(a), per_network(b));
        assert_ne!(per_network(a), per_network(other));
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(per_network(mapped), "192.0.2.7".parse::<IpAddr>().unwrap());
    }

    fn forwarded(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-forwarded-for", value.parse().unwrap());
        headers
    }

    #[test]
    fn only_a_trusted_proxy_names_the_client() {
        let proxy: IpAddr = "10.0.0.5".parse().unwrap();
        let limits = LoginLimits::new(vec![proxy, "10.0.0.6".parse().unwrap()]);
        let client: IpAddr = "203.0.113.9".parse().unwrap();
        // The client wrote a header of its own; the proxies appended what they saw.
        let headers = forwarded("198.51.100.1, 203.0.113.9, 10.0.0.6");
        assert_eq!(limits.client(Some(proxy), &headers), Some(client));
        // Straight from the client: its header is ignored.
        assert_eq!(limits.client(Some(client), &headers), Some(client));
        // A trusted proxy without a header, or with one that does not parse: the proxy.
        assert_eq!(limits.client(Some(proxy), &HeaderMap::new()), Some(proxy));
        assert_eq!(
            limits.client(Some(proxy), &forwarded("nonsense")),
            Some(proxy)
        );
        assert_eq!(limits.client(None, &headers), None);
    }

    #[test]
    fn a_prefix_is_limited_across_addresses() {
        let limits = LoginLimits::new(Vec::new());
        for n in 0..PER_PREFIX {
            let address = IpAddr::from([10, 0, (n / 256) as u8, (n % 256) as u8]);
            assert_eq!(
                limits.attempt(Some(address), &format!("opkey_12{n}")),
                Ok(())
            );
        }
        let fresh = IpAddr::from([10, 9, 9, 9]);
        assert_eq!(limits.attempt(Some(fresh), "opkey_12-last"), Err(REFILL));
        assert_eq!(limits.attempt(Some(fresh), "another-key"), Ok(()));
    }
}
