//! Settings are declared once, each module its own section: a clap `Args` struct whose
//! attributes give every flag its environment name and default (shown by `--help`), and
//! whose serde keys are the config file's. `config` flattens the sections together.

use std::time::Duration;

/// `T` with every setting at its declared default, the environment not read: the values
/// a config file's keys are laid over when no command line is parsed.
pub fn defaults<T: clap::Args + clap::FromArgMatches>() -> T {
    let command = T::augment_args(clap::Command::new("defaults")).mut_args(|arg| arg.env(None));
    let matches = command
        .try_get_matches_from(["defaults"])
        .expect("the declared defaults parse");
    T::from_arg_matches(&matches).expect("the declared defaults parse")
}

/// A number of seconds from the flag `--{flag}`: 0 or more.
pub fn seconds(value: f64, flag: &str) -> Result<Duration, String> {
    Duration::try_from_secs_f64(value)
        .map_err(|_| format!("--{flag} must be a number of seconds, 0 or more"))
}

/// A number of seconds from the flag `--{flag}`: more than 0.
pub fn positive(value: f64, flag: &str) -> Result<Duration, String> {
    Some(seconds(value, flag)?)
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| format!("--{flag} must be more than 0 seconds"))
}
