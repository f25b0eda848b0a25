//! A token bucket: `rate` tokens per second, holding at most `burst`.

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    last: Instant,
}

impl TokenBucket {
    /// A full bucket. `rate == 0` means no limit.
    pub fn new(rate: f64, burst: f64) -> TokenBucket {
        TokenBucket { rate, burst, tokens: burst, last: Instant::now() }
    }

    /// Takes one token, or says how long until one is available.
    pub fn try_take(&mut self) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        self.try_take_at(Instant::now())
    }

    fn try_take_at(&mut self, now: Instant) -> Result<(), Duration> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - self.tokens) / self.rate))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(10.0, 3.0);
        bucket.last = start;
        for _ in 0..3 {
            assert!(bucket.try_take_at(start).is_ok());
        }
        let wait = bucket.try_take_at(start).unwrap_err();
        assert!(wait <= Duration::from_millis(100) && wait > Duration::ZERO);
        assert!(bucket.try_take_at(start + Duration::from_millis(100)).is_ok());
        assert!(bucket.try_take_at(start + Duration::from_millis(100)).is_err());
        // Idle time refills only up to the burst.
        let later = start + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(bucket.try_take_at(later).is_ok());
        }
        assert!(bucket.try_take_at(later).is_err());
    }

    #[test]
    fn rate_zero_is_unlimited() {
        let mut bucket = TokenBucket::new(0.0, 1.0);
        for _ in 0..1000 {
            assert!(bucket.try_take().is_ok());
        }
    }
}
