"""What faces the user: click commands, the apply command and text/JSON rendering."""
