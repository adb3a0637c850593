/* Placeholder: ZeRO partitioning lands here. */
int ds_zero_placeholder(void);
int ds_zero_placeholder(void) { return 0; }
