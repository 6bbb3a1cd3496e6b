//! The one retry policy of every bounded loop in this project: how many attempts, and how long to
//! wait before each one after the first.
//!
//! Writers that lose a race to the same version tend to lose it again together if they retry at
//! once, so every retry waits a random time ("full jitter") in `[0, step)`, where the step starts
//! at `base` and doubles per attempt up to `max_delay`. A loop that measured how long its colliding
//! step took (for a commit, its lost manifest put: once on a local disk, three times on an object
//! store, about the requests of Lance's own attempt there) tells its
//! [`Attempts`] ([`Attempts::collided_over`]), and the steps are then three times that window,
//! doubling, in place of `base`'s: writers that collided over a 60 ms object-store put gain nothing
//! from retrying 2 ms apart, they collide again, and writers that collided over a 200 us put on a
//! local disk lose time waiting many milliseconds (tokio's timer wakes on whole milliseconds, so
//! a wait below one is about one, as Lance's slots are). Lance's own commit loop sizes its backoff slots the
//! same way, by its attempt's time after catching up (`SlotBackoff`: 4, then 8, ... slots of 1.1
//! times that time in whole milliseconds, a mean wait of 1.65 and then 3.85 of them; none at all
//! for an attempt under a millisecond); a step of 3, then 6, ... windows waits about as long on
//! average (1.5, 3, ...). Measured on the whole commit call instead (listing, reading the writers
//! in between, building the manifest), the waits were three to seven times Lance's, and at four writers
//! the writer that kept losing finished three to four times later than the first
//! (`design/benchmarks.md`, "Wait as long as the put took, three times", and "One put on a local
//! disk, three on an object store").
//! The bound is one type, [`RetryPolicy`], so the commit loop, keyed writes and replay count
//! attempts the same way and report the same number.
//!
//! A loop adopts it in a few lines, carrying the last reason to run again into its error:
//!
//! ```ignore
//! let mut attempts = policy.attempts();
//! let mut attempt = attempts.first();                 // at once: a policy makes at least one
//! loop {
//!     match try_once(attempt).await {
//!         Landed(x) => return Ok(x),
//!         // Sleeps before the next attempt; at the bound, `Exhausted { attempts, last: why }`.
//!         Again(why) => attempt = attempts.next_or(why).await?,
//!     }
//! }
//! ```

use std::time::Duration;

use rand::Rng;

/// How many attempts a bounded loop makes and how it spaces them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: usize,
    base: Duration,
    max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 20 attempts, a 2 ms first step, steps of at most 250 ms (unless a measured collision window
    /// widens them, [`Attempts::collided_over`]).
    fn default() -> Self {
        Self { max_attempts: 20, base: Duration::from_millis(2), max_delay: Duration::from_millis(250) }
    }
}

impl RetryPolicy {
    /// A policy of at most `max_attempts` attempts (at least one) with `base` as the first step.
    pub fn new(max_attempts: usize, base: Duration) -> Self {
        Self::default().with_max_attempts(max_attempts).with_base(base)
    }

    /// At most this many attempts, counting the first; zero is read as one.
    pub fn with_max_attempts(mut self, n: usize) -> Self {
        self.max_attempts = n.max(1);
        self
    }

    /// The first backoff step (the bound of the wait before the second attempt).
    pub fn with_base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// No step is longer than this, unless a measured collision window widens it (to at most 24
    /// windows, [`Attempts::collided_over`]): writers that collided over a slow write must wait
    /// that long apart, or they collide again.
    pub fn with_max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    pub fn max_attempts(&self) -> usize {
        self.max_attempts
    }

    /// The upper bound of the wait before attempt `attempt` (1-based): zero for the first attempt,
    /// then `base`, `2 * base`, ... capped at `max_delay`.
    pub fn step_before(&self, attempt: usize) -> Duration {
        if attempt <= 1 {
            return Duration::ZERO;
        }
        let doublings = (attempt - 2).min(16) as u32;
        self.base.saturating_mul(1u32 << doublings).min(self.max_delay)
    }

    /// A random wait in `[0, step_before(attempt))`: full jitter, so racing writers spread out.
    pub fn delay_before(&self, attempt: usize) -> Duration {
        jittered(self.step_before(attempt))
    }

    /// A counter of attempts under this policy.
    pub fn attempts(&self) -> Attempts {
        Attempts { policy: *self, made: 0, window: None, collisions: 0, slept: Duration::ZERO }
    }
}

/// A random wait in `[0, step)` (full jitter); none for a zero step.
fn jittered(step: Duration) -> Duration {
    if step.is_zero() {
        return step;
    }
    step.mul_f64(rand::rng().random_range(0.0..1.0))
}

/// A bounded loop reached its bound: the attempts it made and why the last one must be run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exhausted<W> {
    pub attempts: usize,
    pub last: W,
}

/// The attempts of one bounded loop: [`Attempts::next`] waits as the policy says and yields the
/// attempt number (1-based), or `None` when the bound is reached.
#[derive(Debug, Clone)]
pub struct Attempts {
    policy: RetryPolicy,
    made: usize,
    /// The colliding step's time, once measured ([`Attempts::collided_over`]).
    window: Option<Duration>,
    /// Collisions reported so far: the window's steps double per collision, not per attempt (an
    /// attempt that started at once, having collided with nothing, does not widen them).
    collisions: u32,
    /// Time spent sleeping before attempts, as measured.
    slept: Duration,
}

impl Attempts {
    /// Start the first attempt, at once: a policy makes at least one. For a loop that carries the
    /// last attempt's reason to its error, which then exists whenever the bound is reached:
    /// `attempts.first(); loop { .. attempts.next_or(last).await?; }` ([`Attempts::next_or`]).
    pub fn first(&mut self) -> usize {
        debug_assert_eq!(self.made, 0, "the first attempt is started once, before any other");
        self.made = self.made.max(1);
        self.made
    }

    /// Start the next attempt after one that must be run again for `last`; at the bound, give back
    /// `last` with the count of attempts made, for the loop's contention error.
    pub async fn next_or<W>(&mut self, last: W) -> Result<usize, Exhausted<W>> {
        match self.next().await {
            Some(attempt) => Ok(attempt),
            None => Err(Exhausted { attempts: self.made, last }),
        }
    }

    /// Start the next attempt: sleeps before every attempt but the first.
    pub async fn next(&mut self) -> Option<usize> {
        if self.made >= self.policy.max_attempts {
            return None;
        }
        self.made += 1;
        let delay = jittered(self.step_before(self.made));
        if !delay.is_zero() {
            let sleeping = std::time::Instant::now();
            tokio::time::sleep(delay).await;
            self.slept += sleeping.elapsed();
        }
        Some(self.made)
    }

    /// The last attempt collided with another writer over a step that took `window` (for a commit,
    /// its manifest put): from now on the steps are `3 * window`, doubling per collision, capped at
    /// the policy's `max_delay` or `24 * window`, whichever is longer; the policy's `base` no
    /// longer applies, however short the window. The first measurement is kept: a window measured
    /// under contention is inflated by the contention.
    pub fn collided_over(&mut self, window: Duration) {
        self.window.get_or_insert(window);
        self.collisions = self.collisions.saturating_add(1);
    }

    /// The upper bound of the wait before attempt `attempt`: once a collision window was measured,
    /// its step for the collisions so far (three windows after the first, six after the second,
    /// ...); the policy's step for `attempt` otherwise.
    pub fn step_before(&self, attempt: usize) -> Duration {
        let Some(window) = self.window.filter(|_| attempt > 1) else { return self.policy.step_before(attempt) };
        let doublings = self.collisions.saturating_sub(1).min(16);
        window.saturating_mul(3u32 << doublings).min(self.policy.max_delay.max(window.saturating_mul(24)))
    }

    /// Start the next attempt at once, without the policy's wait: for a loop whose last attempt
    /// wrote nothing and contended for nothing (it saw a newer state before writing, as a commit
    /// whose head moved), where spreading writers out would only delay one that has not collided.
    /// Counts against the bound like any attempt.
    pub fn next_at_once(&mut self) -> Option<usize> {
        if self.made >= self.policy.max_attempts {
            return None;
        }
        self.made += 1;
        Some(self.made)
    }

    /// How many attempts were started.
    pub fn made(&self) -> usize {
        self.made
    }

    /// The time slept before attempts so far (none before the first, nor before one at once).
    pub fn slept(&self) -> Duration {
        self.slept
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_double_from_the_base_and_stop_at_the_cap() {
        let p = RetryPolicy::new(10, Duration::from_millis(2)).with_max_delay(Duration::from_millis(20));
        let steps: Vec<u128> = (1..=7).map(|a| p.step_before(a).as_millis()).collect();
        assert_eq!(steps, vec![0, 2, 4, 8, 16, 20, 20]);
    }

    #[test]
    fn waits_are_jittered_below_the_step() {
        let p = RetryPolicy::new(10, Duration::from_millis(8));
        let waits: Vec<Duration> = (0..200).map(|_| p.delay_before(3)).collect();
        assert!(waits.iter().all(|w| *w < Duration::from_millis(16)));
        let distinct: std::collections::BTreeSet<_> = waits.iter().collect();
        assert!(distinct.len() > 100, "full jitter spreads the waits: {} distinct", distinct.len());
        assert_eq!(p.delay_before(1), Duration::ZERO, "no wait before the first attempt");
    }

    #[test]
    fn a_huge_attempt_number_does_not_overflow() {
        let p = RetryPolicy::new(usize::MAX, Duration::from_secs(u64::MAX / 4));
        assert_eq!(p.step_before(usize::MAX), p.max_delay);
    }

    #[test]
    fn a_measured_collision_window_sets_the_steps_long_or_short() {
        let policy = RetryPolicy::new(30, Duration::from_millis(2)).with_max_delay(Duration::from_millis(250));
        // The steps after each of `collisions` collisions over `first` (later windows ignored).
        let steps_after = |first: Duration, collisions: usize| -> Vec<Duration> {
            let mut a = policy.attempts();
            (1..=collisions)
                .map(|n| {
                    a.collided_over(if n == 1 { first } else { first * 9 });
                    a.step_before(n + 1)
                })
                .collect()
        };
        let ms = |steps: Vec<Duration>| steps.iter().map(|s| s.as_millis()).collect::<Vec<_>>();
        let slow = ms(steps_after(Duration::from_millis(60), 5));
        assert_eq!(slow, vec![180, 360, 720, 1440, 1440], "3, 6, 12, 24 windows, capped at 24 windows");
        let fast = steps_after(Duration::from_micros(100), 12);
        let us: Vec<u128> = fast.iter().take(3).map(|s| s.as_micros()).collect();
        assert_eq!(us, vec![300, 600, 1_200], "a window shorter than the base shortens the steps");
        assert_eq!(fast.last().map(|s| s.as_millis()), Some(250), "a short window's steps stop at the policy's cap");
        let mut once = policy.attempts();
        once.collided_over(Duration::from_millis(1));
        let later: Vec<u128> = (2..=5).map(|a| once.step_before(a).as_millis()).collect();
        assert_eq!(later, vec![3, 3, 3, 3], "attempts that collided with nothing do not widen the steps");
        assert_eq!(once.step_before(1), Duration::ZERO, "no wait before the first attempt");
        let unmeasured: Vec<u128> = (1..=4).map(|a| policy.attempts().step_before(a).as_millis()).collect();
        assert_eq!(unmeasured, vec![0, 2, 4, 8]);
    }

    #[tokio::test]
    async fn attempts_stop_at_the_bound_and_zero_means_one() {
        let mut a = RetryPolicy::new(3, Duration::ZERO).attempts();
        let mut seen = Vec::new();
        while let Some(n) = a.next().await {
            seen.push(n);
        }
        assert_eq!(seen, vec![1, 2, 3]);
        assert_eq!(a.made(), 3);
        let mut one = RetryPolicy::new(0, Duration::ZERO).attempts();
        assert_eq!(one.next().await, Some(1));
        assert_eq!(one.next().await, None);
    }

    #[tokio::test]
    async fn the_first_attempt_starts_at_once_and_a_one_attempt_policy_then_stops() {
        let mut one = RetryPolicy::new(1, Duration::from_secs(10)).attempts();
        assert_eq!(one.first(), 1);
        assert_eq!(one.next().await, None, "the bound counts the first attempt");
        let mut three = RetryPolicy::new(3, Duration::ZERO).attempts();
        assert_eq!(three.first(), 1);
        assert_eq!(three.next_or("first").await, Ok(2));
        assert_eq!(three.next_or("second").await, Ok(3));
        assert_eq!(three.next_or("third").await, Err(Exhausted { attempts: 3, last: "third" }));
        assert_eq!(three.made(), 3);
    }

    #[tokio::test]
    async fn the_time_slept_counts_the_waits_and_nothing_before_the_first_attempt() {
        let mut a = RetryPolicy::new(3, Duration::from_millis(20)).attempts();
        assert_eq!(a.next().await, Some(1));
        assert_eq!(a.slept(), Duration::ZERO, "no wait before the first attempt");
        // The wait before the second is jittered in [0, 20 ms): what was slept lies within the
        // time the call took.
        let started = std::time::Instant::now();
        assert_eq!(a.next().await, Some(2));
        let slept = a.slept();
        assert!(slept <= started.elapsed(), "only the time between: {slept:?}");
        assert!(slept < Duration::from_secs(1), "at most a step or so: {slept:?}");
    }

    #[tokio::test]
    async fn an_attempt_at_once_skips_the_wait_but_counts_against_the_bound() {
        // A 10 s step: any wait would show in the elapsed time.
        let mut a = RetryPolicy::new(3, Duration::from_secs(10)).attempts();
        let started = std::time::Instant::now();
        assert_eq!(a.next().await, Some(1));
        assert_eq!(a.next_at_once(), Some(2));
        assert_eq!(a.next_at_once(), Some(3));
        assert_eq!(a.next_at_once(), None, "the bound holds");
        assert_eq!(a.made(), 3);
        assert!(started.elapsed() < Duration::from_secs(1), "no attempt waited: {:?}", started.elapsed());
        assert_eq!(a.slept(), Duration::ZERO, "nothing slept");
    }
}
