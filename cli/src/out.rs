//! What the command prints, and how it ends when it cannot. `print!` panics
//! when standard output fails (a pipe whose reader has gone, a full disk);
//! every subcommand writes through [`print`] instead, and `main` decides in
//! one place what each failure means.

use std::io::{self, Write};
use std::process::ExitCode;

/// Why a subcommand stopped.
#[derive(Debug)]
pub enum Failure {
    /// Standard output could not be written.
    Output(io::Error),
    /// Anything else, in words, for one line on standard error.
    Message(String),
}

impl From<String> for Failure {
    fn from(message: String) -> Failure {
        Failure::Message(message)
    }
}

impl From<&str> for Failure {
    fn from(message: &str) -> Failure {
        Failure::Message(message.to_string())
    }
}

/// Writes `text` to standard output, flushed: an error shows here rather
/// than when the buffer is dropped at exit, where it would go unnoticed.
pub fn print(text: &str) -> Result<(), Failure> {
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .map_err(Failure::Output)
}

/// One line on standard error. If that cannot be written either, there is
/// no one left to tell, and the exit status says it.
pub fn complain(message: &str) {
    let _ = writeln!(io::stderr(), "vramshare: {message}");
}

/// The exit status for a failure, after saying what it was. A reader that
/// went away (`vramshare ps | head -1`) wanted no more than it read: that
/// ends the command quietly and successfully, whichever subcommand it is.
pub fn exit_code(failure: Failure) -> ExitCode {
    match failure {
        Failure::Output(error) if error.kind() == io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Failure::Output(error) => {
            complain(&format!("cannot write the output: {error}"));
            ExitCode::from(1)
        }
        Failure::Message(message) => {
            complain(&message);
            ExitCode::from(1)
        }
    }
}
