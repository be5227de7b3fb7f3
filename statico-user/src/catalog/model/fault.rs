//! The faults a route injects instead of answering normally: what each is, and the name a `fault=`
//! value gives it. Parsed with a route ([`crate::catalog::route::spec`]), drawn per request
//! ([`super::route`]), and carried out by each protocol in its own terms.

/// A fault a route injects into a fraction of its responses, instead of answering normally.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// Abort the connection (a TCP reset) instead of answering.
    Reset,
    /// Close the connection cleanly instead of answering.
    Close,
    /// Never answer, keeping the connection open.
    Stall,
    /// Send the head and part of the body, then close.
    Truncate,
}

impl Fault {
    /// Every fault, in the order their names are listed in errors.
    pub const ALL: [Fault; 4] = [Fault::Reset, Fault::Close, Fault::Stall, Fault::Truncate];

    /// The name a `fault=` value uses: `reset`, `close`, `stall`, `truncate`.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::Reset => "reset",
            Fault::Close => "close",
            Fault::Stall => "stall",
            Fault::Truncate => "truncate",
        }
    }
}
