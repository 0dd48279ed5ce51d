//! Cooperative cancellation of store reads.
//!
//! `serve` runs each heavy request (a day of series, a diagnosis, a flame graph) on a thread of
//! its own. When its client goes away, or the request outlives its time limit, or the server
//! is shutting down, nobody will read the answer, yet the read would go on decompressing the
//! store for seconds. Every read goes through `stored`'s iterators, so they are where a read
//! asks whether it is still wanted: a read inside [`scope`] whose token was cancelled ends as
//! if the range were exhausted. The caller that cancelled discards the partial result.
//!
//! The token is thread-local rather than a parameter because the reads sit under `diagnose`,
//! `events` and the profile window, none of which should carry a server's concern in its
//! signature; outside a scope nothing is ever cancelled.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A cancellation flag shared by the thread doing a read and whoever may cancel it.
#[derive(Debug, Clone, Default)]
pub struct Token(Arc<AtomicBool>);

impl Token {
    /// A token not yet cancelled.
    pub fn new() -> Self {
        Token::default()
    }

    /// Asks every read in a scope of this token to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether [`cancel`](Token::cancel) was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

thread_local! {
    static CURRENT: RefCell<Vec<Token>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with reads on this thread cancelled by `token` (and by any scope around it).
pub fn scope<R>(token: &Token, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            CURRENT.with(|c| c.borrow_mut().pop());
        }
    }
    CURRENT.with(|c| c.borrow_mut().push(token.clone()));
    let _pop = Pop;
    f()
}

/// The tokens of the scopes this thread is in, for a thread it starts to read on its behalf
/// (see [`adopt`]).
pub fn inherited() -> Vec<Token> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Puts this thread, for the rest of its life, in the scopes of `tokens` (from [`inherited`] on
/// the thread it reads for), so that cancelling that read stops this thread's part of it too.
pub fn adopt(tokens: Vec<Token>) {
    CURRENT.with(|c| c.borrow_mut().extend(tokens));
}

/// Whether the read running on this thread was cancelled.
pub fn cancelled() -> bool {
    CURRENT.with(|c| c.borrow().iter().any(Token::is_cancelled))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_reads_in_a_cancelled_scope_stop() {
        assert!(!cancelled());
        let outer = Token::new();
        let inner = Token::new();
        scope(&outer, || {
            scope(&inner, || {
                assert!(!cancelled());
                outer.cancel();
                assert!(cancelled(), "an outer scope's cancel reaches inner reads");
            });
        });
        assert!(!cancelled(), "the scope ends with its closure");
        let other = std::thread::spawn(cancelled).join().unwrap();
        assert!(!other);
    }

    #[test]
    fn a_panicking_read_leaves_no_scope_behind() {
        let t = Token::new();
        t.cancel();
        let r = std::panic::catch_unwind(|| scope(&t, || panic!("read failed")));
        assert!(r.is_err());
        assert!(!cancelled());
    }
}
