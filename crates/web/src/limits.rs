//! What one client, or many, can make `serve` do.
//!
//! `serve` runs on the host it watches, so a client must not be able to take that host's
//! memory or CPU, with or without a token. Three bounds:
//!
//! - **Per request**: each heavy endpoint has a maximum window ([`max_window`]), `series` a
//!   cap on patterns, series, the samples it decodes and the points it holds before bucketing
//!   ([`MAX_LOADED_POINTS`]), checked before the read starts; a
//!   heavy request is cancelled past [`HEAVY_TIME_LIMIT`] or when its client goes away.
//! - **Light reads** (the newest samples) at most [`LIGHT_AT_ONCE`] at a time on tokio's
//!   blocking pool; the rest wait.
//! - **Heavy work in a fixed pool**: reads of the store run on [`HEAVY_WORKERS`] threads at a
//!   lower priority, fed by a queue of [`HEAVY_QUEUE`]; a request that finds the queue full
//!   gets 429 at once. Light answers (`/api/v1/range`, the assets, `/metrics`) never wait
//!   behind them. Memory then follows from the number of workers times what one bounded
//!   request holds (see `docs/BENCHMARKS.md` for the ceiling measured under load).
//! - **Connections** (in `lib.rs`): at most [`max_connections`], headers within
//!   [`HEADER_TIMEOUT`] (which is also how long a kept-alive connection may sit idle), answers
//!   read by the client without a stall of [`WRITE_TIMEOUT`], and a shutdown that ends within
//!   [`SHUTDOWN_GRACE`].

use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use jitterscope_model::cancel::{self, Token};

use crate::error::ApiError;

/// Threads that read the store for heavy requests. Two cores on the smallest hosts we run on:
/// one worker per core at most, so light requests still find a core that is not niced.
pub const HEAVY_WORKERS: usize = 2;
/// Heavy requests waiting for a worker; the web page asks for its charts at once (eight).
pub const HEAVY_QUEUE: usize = 16;
/// A heavy request's limit, from its arrival to its answer (queueing included).
pub const HEAVY_TIME_LIMIT: Duration = Duration::from_secs(30);
/// Light reads (`/api/v1/range`, `/metrics`: the newest samples) running at once; more wait
/// their turn. Each is small, but a thousand at once would each take a thread and a decoded
/// sample.
pub const LIGHT_AT_ONCE: usize = 8;
/// Niceness of the heavy workers: the recorder and the light answers go first.
const HEAVY_NICE: i32 = 10;

/// How long a client may take to send a request's headers, and how long a kept-alive
/// connection may wait for its next request.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a write of an answer may make no progress (the client stopped reading) before the
/// connection is dropped with the answer.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// From SIGTERM to exit: in-flight answers get this long, then connections are dropped.
pub const SHUTDOWN_GRACE: Duration = Duration::from_millis(1500);

/// `series`: patterns in one `select`. Each pattern is matched against every series of every
/// sample read, so the work is their count times the window.
pub const MAX_PATTERNS: usize = 32;
/// `series`: characters in one pattern (matching is linear in it).
pub const MAX_PATTERN_LEN: usize = 256;
/// `series`: series in one answer (a glob over processes takes `top=`).
pub const MAX_SERIES: usize = 500;
/// `series`: samples decoded for one answer when the series are not in the signals lane: a
/// day at the default one-second interval, about 15 s of one core for host series.
pub const MAX_DECODED_SAMPLES: u64 = 86_400;

/// `series`: points a read may hold before it is bucketed, over all the series its select
/// takes (16 bytes each): every series of the bench's host (1,848) over an hour is estimated
/// at 3.2 M points, and two such reads at once took `serve` to 69 MiB, ten at once to 73 MiB.
/// So the [`HEAVY_WORKERS`] reading at once stay inside `serve`'s 256 MiB whatever the store
/// holds. Host and cgroup series count a
/// point per sample of the window; process series are read on a subsample of at most
/// `PROCESS_POINTS` points each.
pub const MAX_LOADED_POINTS: u64 = 4_000_000;

/// `series`: buckets in one answer, over all its series (each bucket is a mean and a maximum:
/// about 10 MB of JSON at this cap).
pub const MAX_ANSWER_POINTS: u64 = 500_000;

const HOUR_NS: i64 = 3_600_000_000_000;

/// The widest window each heavy endpoint reads at once.
pub fn max_window(endpoint: &str) -> i64 {
    match endpoint {
        // A day of a profile is a day of the detail lane: the largest part of the store.
        "flame" => 6 * HOUR_NS,
        _ => 24 * HOUR_NS,
    }
}

/// 400 unless the recorded part of `[from, to]` (the store's first and last sample times are
/// `recorded`) fits `endpoint`'s window: asking for "everything" of a short store is fine,
/// reading more than the limit is not.
pub fn check_window(
    endpoint: &str,
    from: i64,
    to: i64,
    recorded: (i64, i64),
) -> Result<(), ApiError> {
    let max = max_window(endpoint);
    let span = to.min(recorded.1).saturating_sub(from.max(recorded.0));
    if span > max {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            format!(
                "the window holds {} of samples; /api/v1/{endpoint} reads at most {} at once",
                human(span),
                human(max)
            ),
        ));
    }
    Ok(())
}

fn human(ns: i64) -> String {
    let s = ns / 1_000_000_000;
    if s >= 86_400 && s % 86_400 == 0 {
        format!("{} d", s / 86_400)
    } else if s >= 86_400 {
        format!("{:.1} d", s as f64 / 86_400.0)
    } else if s >= 3600 {
        format!("{:.1} h", s as f64 / 3600.0)
    } else {
        format!("{s} s")
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The fixed pool heavy requests run on.
#[derive(Debug)]
pub struct Heavy {
    queue: SyncSender<(Token, Job)>,
    stopping: Token,
}

impl Heavy {
    /// Starts the workers; `stopping` cancels every read (the server's stop).
    pub fn start(stopping: Token) -> std::io::Result<Heavy> {
        let (tx, rx) = sync_channel::<(Token, Job)>(HEAVY_QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for i in 0..HEAVY_WORKERS {
            let rx = rx.clone();
            std::thread::Builder::new()
                .name(format!("serve-heavy-{i}"))
                .spawn(move || worker(&rx))?;
        }
        Ok(Heavy {
            queue: tx,
            stopping,
        })
    }

    /// Runs `f` on a worker, with its store reads cancelled by `token`. 429 when the queue is
    /// full; 503 past the time limit (the read is then cancelled) or when `token` was cancelled
    /// meanwhile (the client left, or the server is stopping).
    pub async fn run<T: Send + 'static>(
        &self,
        token: Token,
        f: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        // Whoever drops this future (hyper, when the client hangs up) cancels the read.
        struct CancelOnDrop(Token);
        impl Drop for CancelOnDrop {
            fn drop(&mut self) {
                self.0.cancel();
            }
        }
        let _guard = CancelOnDrop(token.clone());
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (t, stop) = (token.clone(), self.stopping.clone());
        let job: Job = Box::new(move || {
            let r = cancel::scope(&stop, || cancel::scope(&t, f));
            let _ = tx.send(r);
        });
        match self.queue.try_send((token.clone(), job)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "{HEAVY_QUEUE} heavy requests are already waiting for the {HEAVY_WORKERS} readers; retry later"
                    ),
                ))
            }
            Err(TrySendError::Disconnected(_)) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the readers have stopped".into(),
                ))
            }
        }
        let out = match tokio::time::timeout(HEAVY_TIME_LIMIT, rx).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the read failed".into(),
            )),
            Err(_) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "the request took longer than {} s, the limit; ask for a shorter window",
                    HEAVY_TIME_LIMIT.as_secs()
                ),
            )),
        };
        // A cancelled read ended early: what it returned is partial and must not be served.
        if (token.is_cancelled() || self.stopping.is_cancelled()) && out.is_ok() {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the request was cancelled (the server is stopping)".into(),
            ));
        }
        out
    }
}

/// Runs a light read `f` on the blocking pool once one of [`LIGHT_AT_ONCE`] places is free.
pub async fn light<T: Send + 'static>(
    places: &tokio::sync::Semaphore,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    let _place = places.acquire().await.map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is stopping".into(),
        )
    })?;
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}")))
}

fn worker(rx: &Mutex<Receiver<(Token, Job)>>) {
    // SAFETY: setpriority on this thread's own id; no memory is passed.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, HEAVY_NICE);
    }
    loop {
        let next = rx.lock().map(|r| r.recv());
        let Ok(Ok((token, job))) = next else {
            return;
        };
        // A job whose client left while it queued costs nothing.
        if token.is_cancelled() {
            continue;
        }
        // A panicking read answers its request (the sender is dropped) and keeps the worker.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
    }
}

/// The connections served at once: what the open-file limit allows, less room for the store's
/// files and the process's own, raising the soft limit to the hard one first (a default of
/// 1024 would let a thousand idle sockets shut every client out).
pub fn max_connections() -> usize {
    const RESERVE: u64 = 128;
    const CAP: u64 = 8192;
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid pointer to a local.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 256;
        }
        let want = lim.rlim_max.min(CAP + RESERVE);
        if lim.rlim_cur < want {
            let raised = libc::rlimit {
                rlim_cur: want,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = want;
            }
        }
    }
    (lim.rlim_cur.saturating_sub(RESERVE)).clamp(16, CAP) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_over_the_limit_name_it() {
        let all = (i64::MIN, i64::MAX);
        check_window("series", 0, 24 * HOUR_NS, all).unwrap();
        let e = check_window("series", 0, 24 * HOUR_NS + 1, all).unwrap_err();
        assert!(e.1.contains("at most 1 d"), "{}", e.1);
        let e = check_window("flame", 0, 7 * HOUR_NS, all).unwrap_err();
        assert!(e.1.contains("7.0 h") && e.1.contains("6.0 h"), "{}", e.1);
        // Only what was recorded counts.
        check_window("flame", 0, 1000 * HOUR_NS, (HOUR_NS, 2 * HOUR_NS)).unwrap();
        let e = check_window("series", 0, 100 * HOUR_NS, (HOUR_NS, 40 * HOUR_NS)).unwrap_err();
        assert!(e.1.contains("holds 1.6 d of samples"), "{}", e.1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_full_queue_answers_429_and_a_cancelled_read_is_not_served() {
        let heavy = Arc::new(Heavy::start(Token::new()).unwrap());
        let gate = Arc::new(std::sync::Barrier::new(HEAVY_WORKERS + 1));
        // Hold every worker, fill the queue, then one more.
        let mut held = Vec::new();
        for _ in 0..HEAVY_WORKERS {
            let (h, g) = (heavy.clone(), gate.clone());
            held.push(tokio::spawn(async move {
                h.run(Token::new(), move || {
                    g.wait();
                    Ok(1)
                })
                .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let mut queued = Vec::new();
        for _ in 0..HEAVY_QUEUE {
            let h = heavy.clone();
            queued.push(tokio::spawn(
                async move { h.run(Token::new(), || Ok(2)).await },
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        let e = heavy.run(Token::new(), || Ok(3)).await.unwrap_err();
        assert_eq!(e.0, StatusCode::TOO_MANY_REQUESTS);
        gate.wait();
        for h in held {
            assert_eq!(h.await.unwrap().unwrap(), 1);
        }
        for q in queued {
            assert_eq!(q.await.unwrap().unwrap(), 2);
        }
        // A read that sees its token cancelled ends early; its partial answer is refused.
        let t = Token::new();
        let t2 = t.clone();
        let e = heavy
            .run(t, move || {
                t2.cancel();
                Ok(cancel::cancelled())
            })
            .await
            .unwrap_err();
        assert_eq!(e.0, StatusCode::SERVICE_UNAVAILABLE);
    }
}
