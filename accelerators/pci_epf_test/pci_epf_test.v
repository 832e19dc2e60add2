// pci_epf_test.v - Linux's PCI endpoint test function (drivers/pci/endpoint/functions/
// pci-epf-test.c, v6.1) as an accelerator in tlpx's slot: its register block, and READ, WRITE
// and COPY by DMA with the CRC-32 computed in the data path. Plain Verilog-2005, the slot's
// Verilog interface v1 (docs/accelerators.md); the register table is in dut.toml.
//
// Behaviour, as the host driver pci_endpoint_test sees pci-epf-test:
//  - A write of `command` starts it (pci-epf-test polls the register; here the command runs as
//    soon as the module is idle). The command register clears itself when the command is taken,
//    and `status` is cleared then. Commands written while one runs wait for it.
//  - irq_type > 2: the command is dropped (status stays 0), as pci-epf-test.
//  - Priority as pci-epf-test: RAISE_LEGACY_IRQ, WRITE, READ, COPY, RAISE_MSI_IRQ, RAISE_MSIX_IRQ.
//  - READ (b3): DMA-read `size` bytes at src; crc32_le(~0, data, size) == checksum -> READ_SUCCESS,
//    else READ_FAIL. WRITE (b4): `size` pseudo-random bytes (xorshift32) to dst, their CRC into
//    checksum, WRITE_SUCCESS. COPY (b5): src streamed to dst, COPY_SUCCESS; its CRC goes into
//    checksum too (a tlpx addition: pci-epf-test leaves checksum alone on COPY; the host driver
//    does not read it then). A DMA error (the slot's rd_error/wr_error) gives the _FAIL bit; an
//    address that is not 4-byte aligned gives _FAIL and SRC/DST_ADDR_INVALID without any DMA
//    (the slot's DMA port moves whole DWs from DW-aligned addresses).
//  - Then status |= IRQ_RAISED and the interrupt: irq_type 1 (MSI) with irq_number 1..msi_vectors
//    (the vectors the host granted, from the card's MSI block) pulses `irq` with irq_vector =
//    irq_number - 1 (the slot's interrupt-vector ports, dut.toml's interrupt_vectors); other types
//    or numbers raise nothing (pci-epf-test sets IRQ_RAISED and fails to raise then too: its
//    pci_epc_raise_irq refuses a number above the count pci_epc_get_msi gives).
//  - RAISE_LEGACY_IRQ: status = IRQ_RAISED, no interrupt (no INTx on the card).
//    RAISE_MSI_IRQ with irq_number 1..msi_vectors: status = IRQ_RAISED and that vector's MSI
//    (pci-epf-test's check: the command is dropped, status 0, for a number above the count).
//    RAISE_MSIX_IRQ with irq_number 1..msi_vectors while MSI-X is on: status = IRQ_RAISED and
//    that vector's MSI-X message (entry irq_number - 1); otherwise nothing.
//  - flags b0 USE_DMA is stored and ignored: transfers always use the DMA port.
//  - fault (0x40, tlpx's) b0: one data bit per transfer is flipped (bit 0 of byte size/2): before
//    the CRC for READ (the CRC no longer matches: READ_FAIL), after it for WRITE and COPY (the
//    host's copy differs from the checksum or the source).
//  - Transfers larger than CHUNK bytes are split into several DMA requests (the port's length is
//    24 bits); size 0 moves nothing and succeeds (CRC 0xffffffff).
/* verilator lint_off DECLFILENAME */  // the manifest names the top module, not the file
module tlpx_pci_epf_test (
    input  wire        clk,            // card clock
    input  wire        rst,            // synchronous, active high
    input  wire [31:0] wb_adr,         // byte address within the window
    input  wire [31:0] wb_dat_w,
    output reg  [31:0] wb_dat_r,
    input  wire [3:0]  wb_sel,
    input  wire        wb_cyc,
    input  wire        wb_stb,
    input  wire        wb_we,
    output reg         wb_ack,
    output wire        rd_req_valid,
    input  wire        rd_req_ready,
    output wire [63:0] rd_req_addr,
    output wire [23:0] rd_req_len,
    input  wire        rd_valid,
    output wire        rd_ready,
    input  wire [31:0] rd_data,
    input  wire        rd_last,
    input  wire        rd_error,
    output wire        wr_req_valid,
    input  wire        wr_req_ready,
    output wire [63:0] wr_req_addr,
    output wire [23:0] wr_req_len,
    output wire        wr_valid,
    input  wire        wr_ready,
    output wire [31:0] wr_data,
    input  wire        wr_done,
    input  wire        wr_error,
    output reg         irq,            // one-cycle pulse: the MSI
    output reg  [4:0]  irq_vector,     // its vector (irq_number - 1)
    input  wire [5:0]  msi_vectors,    // vectors the host granted (1..32): MSI's, or MSI-X's table
    input  wire        msix_enabled,   // the host turned MSI-X on (MSI is off then)
    output wire        busy            // a command runs
);
    // Register offsets (bytes; struct pci_epf_test_reg, and tlpx's fault register).
    localparam [11:0] REG_MAGIC = 12'h000, REG_COMMAND = 12'h004, REG_STATUS = 12'h008,
                      REG_SRC_LO = 12'h00c, REG_SRC_HI = 12'h010, REG_DST_LO = 12'h014,
                      REG_DST_HI = 12'h018, REG_SIZE = 12'h01c, REG_CHECKSUM = 12'h020,
                      REG_IRQ_TYPE = 12'h024, REG_IRQ_NUMBER = 12'h028, REG_FLAGS = 12'h02c,
                      REG_FAULT = 12'h040;
    // command bits
    localparam CMD_RAISE_LEGACY = 0, CMD_RAISE_MSI = 1, CMD_RAISE_MSIX = 2,
               CMD_READ = 3, CMD_WRITE = 4, CMD_COPY = 5;
    // status bits
    localparam [31:0] ST_READ_SUCCESS = 32'h001, ST_READ_FAIL = 32'h002, ST_WRITE_SUCCESS = 32'h004,
                     ST_WRITE_FAIL = 32'h008, ST_COPY_SUCCESS = 32'h010, ST_COPY_FAIL = 32'h020,
                     ST_IRQ_RAISED = 32'h040, ST_SRC_INVALID = 32'h080, ST_DST_INVALID = 32'h100;
    localparam [31:0] IRQ_TYPE_MSI = 32'd1, IRQ_TYPE_MSIX = 32'd2;
    // Largest DMA request: a multiple of 4 below the port's 2^24 bytes.
    localparam [31:0] CHUNK = 32'h0080_0000;

    // Registers ----------------------------------------------------------------------------------
    reg [31:0] magic, command, status, src_lo, src_hi, dst_lo, dst_hi, size, checksum;
    reg [31:0] irq_type, irq_number, flags;
    // An MSI number the host granted (pci-epf-test: 1 <= irq_number <= pci_epc_get_msi()).
    // pci-epf-test raises MSI n only when 1 <= n <= pci_epc_get_msi() (0 while MSI-X is on: the
    // host turns MSI off for it), MSI-X n only when n <= pci_epc_get_msix() (0 while it is off).
    wire number_ok = (irq_number != 32'd0) && (irq_number <= {26'd0, msi_vectors});
    wire msi_number_ok = number_ok && !msix_enabled;
    wire msix_number_ok = number_ok && msix_enabled;
    reg        fault;

    function [31:0] merge;  // a write through the byte selects
        input [31:0] old, val;
        input [3:0]  sel;
        begin
            merge = {sel[3] ? val[31:24] : old[31:24], sel[2] ? val[23:16] : old[23:16],
                     sel[1] ? val[15:8]  : old[15:8],  sel[0] ? val[7:0]   : old[7:0]};
        end
    endfunction

    // CRC-32 as Linux's crc32_le: reflected, polynomial 0xedb88320, no final inversion.
    function [31:0] crc_byte;
        input [31:0] crc;
        input [7:0]  b;
        integer k;
        reg [31:0] c;
        begin
            c = crc ^ {24'd0, b};
            for (k = 0; k < 8; k = k + 1)
                c = c[0] ? ((c >> 1) ^ 32'hedb88320) : (c >> 1);
            crc_byte = c;
        end
    endfunction

    // The CRC after the first `n` bytes (1..4, little-endian) of a DW.
    function [31:0] crc_dw;
        input [31:0] crc;
        input [31:0] dw;
        input [2:0]  n;
        reg [31:0] c;
        begin
            c = crc_byte(crc, dw[7:0]);
            if (n > 3'd1) c = crc_byte(c, dw[15:8]);
            if (n > 3'd2) c = crc_byte(c, dw[23:16]);
            if (n > 3'd3) c = crc_byte(c, dw[31:24]);
            crc_dw = c;
        end
    endfunction

    // Command engine -----------------------------------------------------------------------------
    localparam [1:0] S_IDLE = 2'd0, S_DECODE = 2'd1, S_XFER = 2'd2, S_END = 2'd3;
    reg [1:0]  state;
    reg [5:0]  cmd;
    reg        do_rd, do_wr, is_read, is_write;
    reg [63:0] rd_addr, wr_addr;       // next request's address
    reg [31:0] rd_left, wr_left;       // bytes not yet requested
    reg        rd_busy, wr_busy;       // a request is in the port
    reg        rd_req_r, wr_req_r;     // a request is offered
    reg [23:0] rd_len_r, wr_len_r;
    reg        rd_fail, wr_fail;
    reg [31:0] pos;                    // bytes through the data path
    reg [31:0] xfer_size;
    reg [31:0] crc;
    reg [31:0] rng;                    // xorshift32 state (never 0)
    reg        ev_irq;                 // latched interrupt parameters of the command
    wire [31:0] flip_dw = xfer_size >> 3;   // DW holding byte size/2
    wire [1:0]  flip_byte = xfer_size[2:1];
    wire [31:0] flip_mask = (fault && pos[31:2] == flip_dw[29:0]) ? (32'd1 << {flip_byte, 3'd0}) : 32'd0;
    wire [31:0] left_bytes = xfer_size - pos;
    wire [2:0]  dw_bytes = (left_bytes > 32'd3) ? 3'd4 : left_bytes[2:0];
    wire [31:0] rng_next0 = rng ^ (rng << 13);
    wire [31:0] rng_next1 = rng_next0 ^ (rng_next0 >> 17);
    wire [31:0] rng_next  = rng_next1 ^ (rng_next1 << 5);

    // Data path: READ consumes rd_data; WRITE produces random DWs; COPY passes rd_data on.
    wire copy = do_rd && do_wr;
    wire xfer = (state == S_XFER);
    assign rd_ready = xfer && do_rd && (!copy || (wr_busy && wr_ready));
    assign wr_valid = xfer && do_wr && wr_busy && (!copy || rd_valid);
    wire [31:0] data_in = copy ? rd_data : rng;
    wire rd_take = rd_valid && rd_ready;
    wire wr_take = wr_valid && wr_ready;
    wire dw_step = do_rd ? rd_take : wr_take;        // one DW through the data path
    // READ: flip before the CRC; WRITE/COPY: after it.
    wire [31:0] crc_data = is_read ? (rd_data ^ flip_mask) : data_in;
    assign wr_data = data_in ^ flip_mask;

    assign rd_req_valid = rd_req_r;
    assign rd_req_addr  = rd_addr;
    assign rd_req_len   = rd_len_r;
    assign wr_req_valid = wr_req_r;
    assign wr_req_addr  = wr_addr;
    assign wr_req_len   = wr_len_r;
    // irq too: its pulse ends with a clock edge, which a gated clock must still give.
    assign busy = (state != S_IDLE) || (command != 32'd0) || irq;

    wire [31:0] rd_chunk = (rd_left > CHUNK) ? CHUNK : rd_left;
    wire [31:0] wr_chunk = (wr_left > CHUNK) ? CHUNK : wr_left;
    wire [11:0] a = wb_adr[11:0];  // the window is 4 KiB: the adapter sends no higher address
    /* verilator lint_off UNUSEDSIGNAL */
    wire unused = &{1'b0, wb_adr[31:12], flip_dw[31:30], rd_chunk[31:24], wr_chunk[31:24]};
    /* verilator lint_on UNUSEDSIGNAL */
    // Addresses the DMA port cannot take (it moves DWs from DW-aligned addresses).
    wire src_bad = !cmd[CMD_WRITE] && src_lo[1:0] != 2'd0;                  // READ, COPY
    wire dst_bad = (cmd[CMD_WRITE] || !cmd[CMD_READ]) && dst_lo[1:0] != 2'd0; // WRITE, COPY
    wire wb_write = wb_cyc && wb_stb && wb_we && !wb_ack;
    wire wb_read  = wb_cyc && wb_stb && !wb_we && !wb_ack;

    always @(posedge clk) begin
        if (rst) begin
            magic <= 32'd0; command <= 32'd0; status <= 32'd0; src_lo <= 32'd0; src_hi <= 32'd0;
            dst_lo <= 32'd0; dst_hi <= 32'd0; size <= 32'd0; checksum <= 32'd0; irq_type <= 32'd0;
            irq_number <= 32'd0; flags <= 32'd0; fault <= 1'b0;
            wb_ack <= 1'b0; wb_dat_r <= 32'd0; irq <= 1'b0; irq_vector <= 5'd0;
            state <= S_IDLE; cmd <= 6'd0; do_rd <= 1'b0; do_wr <= 1'b0; is_read <= 1'b0; is_write <= 1'b0;
            rd_busy <= 1'b0; wr_busy <= 1'b0; rd_req_r <= 1'b0; wr_req_r <= 1'b0;
            rd_fail <= 1'b0; wr_fail <= 1'b0; rd_left <= 32'd0; wr_left <= 32'd0;
            rd_addr <= 64'd0; wr_addr <= 64'd0; rd_len_r <= 24'd0; wr_len_r <= 24'd0;
            pos <= 32'd0; xfer_size <= 32'd0; crc <= 32'hffffffff; rng <= 32'h2545f491; ev_irq <= 1'b0;
        end else begin
            irq <= 1'b0;
            // Wishbone: one access per two cycles, acknowledged the cycle after the strobe.
            wb_ack <= wb_cyc && wb_stb && !wb_ack;
            if (wb_write) begin
                case (a)
                    REG_MAGIC:      magic      <= merge(magic, wb_dat_w, wb_sel);
                    REG_COMMAND:    command    <= merge(command, wb_dat_w, wb_sel);
                    REG_STATUS:     status     <= merge(status, wb_dat_w, wb_sel);
                    REG_SRC_LO:     src_lo     <= merge(src_lo, wb_dat_w, wb_sel);
                    REG_SRC_HI:     src_hi     <= merge(src_hi, wb_dat_w, wb_sel);
                    REG_DST_LO:     dst_lo     <= merge(dst_lo, wb_dat_w, wb_sel);
                    REG_DST_HI:     dst_hi     <= merge(dst_hi, wb_dat_w, wb_sel);
                    REG_SIZE:       size       <= merge(size, wb_dat_w, wb_sel);
                    REG_CHECKSUM:   checksum   <= merge(checksum, wb_dat_w, wb_sel);
                    REG_IRQ_TYPE:   irq_type   <= merge(irq_type, wb_dat_w, wb_sel);
                    REG_IRQ_NUMBER: irq_number <= merge(irq_number, wb_dat_w, wb_sel);
                    REG_FLAGS:      flags      <= merge(flags, wb_dat_w, wb_sel);
                    REG_FAULT:      if (wb_sel[0]) fault <= wb_dat_w[0];
                    default: ;
                endcase
            end
            if (wb_read) begin
                case (a)
                    REG_MAGIC:      wb_dat_r <= magic;
                    REG_COMMAND:    wb_dat_r <= command;
                    REG_STATUS:     wb_dat_r <= status;
                    REG_SRC_LO:     wb_dat_r <= src_lo;
                    REG_SRC_HI:     wb_dat_r <= src_hi;
                    REG_DST_LO:     wb_dat_r <= dst_lo;
                    REG_DST_HI:     wb_dat_r <= dst_hi;
                    REG_SIZE:       wb_dat_r <= size;
                    REG_CHECKSUM:   wb_dat_r <= checksum;
                    REG_IRQ_TYPE:   wb_dat_r <= irq_type;
                    REG_IRQ_NUMBER: wb_dat_r <= irq_number;
                    REG_FLAGS:      wb_dat_r <= flags;
                    REG_FAULT:      wb_dat_r <= {31'd0, fault};
                    default:        wb_dat_r <= 32'd0;
                endcase
            end

            case (state)
            S_IDLE:
                // A command written in this cycle is taken in the next (the write lands first).
                if (command != 32'd0 && !wb_write) begin
                    cmd <= command[5:0];
                    command <= 32'd0;
                    status <= 32'd0;
                    state <= S_DECODE;
                end
            S_DECODE: begin
                state <= S_IDLE;
                xfer_size <= size;
                pos <= 32'd0;
                crc <= 32'hffffffff;
                rd_fail <= 1'b0; wr_fail <= 1'b0;
                rd_addr <= {src_hi, src_lo}; wr_addr <= {dst_hi, dst_lo};
                ev_irq <= ((irq_type == IRQ_TYPE_MSI) && msi_number_ok) || ((irq_type == IRQ_TYPE_MSIX) && msix_number_ok);
                irq_vector <= irq_number[4:0] - 5'd1;
                do_rd <= 1'b0; do_wr <= 1'b0; is_read <= 1'b0; is_write <= 1'b0;
                if (irq_type > 32'd2) begin
                    // dropped, as pci-epf-test ("invalid IRQ type")
                end else if (cmd[CMD_RAISE_LEGACY]) begin
                    status <= ST_IRQ_RAISED;
                end else if (cmd[CMD_WRITE] || cmd[CMD_READ] || cmd[CMD_COPY]) begin
                    is_write <= cmd[CMD_WRITE];
                    is_read  <= !cmd[CMD_WRITE] && cmd[CMD_READ];
                    do_rd <= !cmd[CMD_WRITE];                         // READ or COPY
                    do_wr <= cmd[CMD_WRITE] || !cmd[CMD_READ];        // WRITE or COPY
                    rd_left <= cmd[CMD_WRITE] ? 32'd0 : size;
                    wr_left <= (cmd[CMD_WRITE] || !cmd[CMD_READ]) ? size : 32'd0;
                    state <= S_XFER;
                    if (src_bad || dst_bad) begin
                        rd_left <= 32'd0; wr_left <= 32'd0;
                        rd_fail <= src_bad; wr_fail <= dst_bad;
                        status <= (src_bad ? ST_SRC_INVALID : 32'd0) | (dst_bad ? ST_DST_INVALID : 32'd0);
                    end
                end else if (cmd[CMD_RAISE_MSI]) begin
                    if (msi_number_ok) begin
                        status <= ST_IRQ_RAISED;
                        irq <= 1'b1;
                    end
                end else if (cmd[CMD_RAISE_MSIX]) begin
                    if (msix_number_ok) begin
                        status <= ST_IRQ_RAISED;
                        irq <= 1'b1;
                    end
                end
            end
            S_XFER: begin
                // Requests: the next chunk once the port has finished the previous one.
                if (!rd_busy && !rd_req_r && rd_left != 32'd0) begin
                    rd_req_r <= 1'b1;
                    rd_len_r <= rd_chunk[23:0];
                end
                if (rd_req_r && rd_req_ready) begin
                    rd_req_r <= 1'b0;
                    rd_busy <= 1'b1;
                    rd_addr <= rd_addr + {32'd0, 8'd0, rd_len_r};
                    rd_left <= rd_left - {8'd0, rd_len_r};
                end
                if (!wr_busy && !wr_req_r && wr_left != 32'd0) begin
                    wr_req_r <= 1'b1;
                    wr_len_r <= wr_chunk[23:0];
                end
                if (wr_req_r && wr_req_ready) begin
                    wr_req_r <= 1'b0;
                    wr_busy <= 1'b1;
                    wr_addr <= wr_addr + {32'd0, 8'd0, wr_len_r};
                    wr_left <= wr_left - {8'd0, wr_len_r};
                end
                if (dw_step) begin
                    pos <= pos + {29'd0, dw_bytes};
                    crc <= crc_dw(crc, crc_data, dw_bytes);
                    if (is_write) rng <= rng_next;
                end
                if (rd_take && rd_last) begin
                    rd_busy <= 1'b0;
                    if (rd_error) begin
                        // No further chunk; in a COPY the chunk being written ends with this DW.
                        rd_fail <= 1'b1;
                        rd_left <= 32'd0;
                        wr_left <= 32'd0;
                    end
                end
                if (wr_done) begin
                    wr_busy <= 1'b0;
                    if (wr_error) begin
                        wr_fail <= 1'b1;
                        wr_left <= 32'd0;
                    end
                end
                if (rd_left == 32'd0 && wr_left == 32'd0 && !rd_busy && !wr_busy && !rd_req_r && !wr_req_r)
                    state <= S_END;
            end
            S_END: begin
                state <= S_IDLE;
                if (is_read)
                    status <= status | ((rd_fail || crc != checksum) ? ST_READ_FAIL : ST_READ_SUCCESS) | ST_IRQ_RAISED;
                else if (is_write)
                    status <= status | (wr_fail ? ST_WRITE_FAIL : ST_WRITE_SUCCESS) | ST_IRQ_RAISED;
                else
                    status <= status | ((rd_fail || wr_fail) ? ST_COPY_FAIL : ST_COPY_SUCCESS) | ST_IRQ_RAISED;
                if (!is_read) checksum <= crc;
                irq <= ev_irq;
            end
            endcase
        end
    end
endmodule
