//! The input thread: terminal keys become [`Action`]s on the event channel.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Duration;

use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::state::Action;
use super::Event;

/// The action a key asks for, if any.
pub fn action_for(key: KeyEvent) -> Option<Action> {
    if key.kind != KeyEventKind::Press {
        return None;
    }
    match key.code {
        KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => Some(Action::Quit),
        KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => Some(Action::Quit),
        KeyCode::Char('p') | KeyCode::Char(' ') => Some(Action::Pause),
        KeyCode::Char('c') => Some(Action::Clear),
        KeyCode::Tab | KeyCode::Right | KeyCode::Down => Some(Action::NextPanel),
        KeyCode::BackTab | KeyCode::Left | KeyCode::Up => Some(Action::PreviousPanel),
        KeyCode::Char('z') | KeyCode::Enter => Some(Action::Zoom),
        _ => None,
    }
}

/// Reads the terminal until `stop` is set or the channel closes.
pub fn run(events: Sender<Event>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match event::poll(Duration::from_millis(100)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => return,
        }
        let action = match event::read() {
            Ok(TermEvent::Key(key)) => action_for(key),
            Ok(TermEvent::Resize(..)) => Some(Action::Redraw),
            Ok(_) => None,
            Err(_) => return,
        };
        if let Some(a) = action {
            if events.send(Event::Input(a)).is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_actions() {
        let press = |code| KeyEvent::new(code, KeyModifiers::NONE);
        assert_eq!(action_for(press(KeyCode::Char('q'))), Some(Action::Quit));
        assert_eq!(action_for(press(KeyCode::Char('p'))), Some(Action::Pause));
        assert_eq!(action_for(press(KeyCode::Char('c'))), Some(Action::Clear));
        assert_eq!(action_for(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)), Some(Action::Quit));
        assert_eq!(action_for(press(KeyCode::Tab)), Some(Action::NextPanel));
        assert_eq!(action_for(press(KeyCode::Left)), Some(Action::PreviousPanel));
        assert_eq!(action_for(press(KeyCode::Char('x'))), None);
    }
}
