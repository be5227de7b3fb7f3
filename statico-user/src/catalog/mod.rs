//! (being written)
pub mod response;
pub mod site;
