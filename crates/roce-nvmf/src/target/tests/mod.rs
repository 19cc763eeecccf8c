//! The target core driven through whole flows with a simulated driver.

mod bad_input;
mod flows;
mod mutate;
mod sim;
