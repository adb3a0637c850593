/* Placeholder until the controller (start, supervise, stop) lands. */
int ds_controller_placeholder(void);
int ds_controller_placeholder(void) { return 0; }
